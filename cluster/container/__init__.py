"""The `docker` backend: the `local` backend's nodes, each in a container of a locally built image
(cluster.py: the cluster; node.py: a node and a noise program as containers; engine.py: the Docker
engine; image.py: the image).

May import: cluster.local and below."""
