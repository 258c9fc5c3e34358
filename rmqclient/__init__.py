"""A small, exact implementation of RocketMQ's remoting protocol (the Java clients' wire protocol).

No maintained Python library speaks it; the official Python 5.x client goes through the gRPC
proxy instead. Protocol facts are from the RocketMQ sources of the pinned version
(remoting/.../protocol/RemotingCommand.java, RocketMQSerializable.java, RequestCode.java).
"""
from rmqclient.frame import Frame, FrameError, decode_frame, encode_frame, FrameReader
from rmqclient.admin import AdminClient, RemotingError

__all__ = ["Frame", "FrameError", "decode_frame", "encode_frame", "FrameReader", "AdminClient", "RemotingError"]
