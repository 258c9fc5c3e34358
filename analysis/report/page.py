"""The reports' one page frame: a self-contained HTML page (the style inline, no scripts, nothing
fetched) for the loss/duplication report (analysis/report/report.py) and the upstream corpus's
(analysis/report/corpus.py). Light on purpose: importing it draws in no plotting."""
from __future__ import annotations

import html

STYLE = ("body{font-family:sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse;margin:.5em 0}"
         "td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}th{background:#eceff1}"
         ".warn{color:#b71c1c}.plot svg{max-width:100%;height:auto}section{margin-top:2em}")


def page(title: str, body: str) -> str:
    return (f"<!doctype html><html><head><meta charset=utf-8><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body>{body}</body></html>\n")
