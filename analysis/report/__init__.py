"""What a person reads: the loss/duplication report (one self-contained HTML page), its plots, its
sections on contracts and comparisons, the verdict in words, the explored schedules and the upstream
corpus's page.

May import: analysis.judge and below; never analysis.history."""
