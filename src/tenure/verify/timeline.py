"""A history drawn as an HTML page: one lane per client, one bar per call from its
invocation to its answer (an unanswered call runs to the edge, dashed), the calls of each
violation's excerpt outlined in red. Hovering a bar shows the call and its answer.
Self-contained (inline SVG, no script), so it can be attached to a bug report."""

from __future__ import annotations

import html
import math
import pathlib
from collections.abc import Sequence

from tenure.verify.check import Report
from tenure.verify.history import Operation

__all__ = ["render_timeline", "write_timeline"]

MAX_CALLS = 3000
"""Calls drawn per name; a longer history is drawn around its violations only."""
_COLOURS = {"acquire": "#4c78a8", "release": "#54a24b", "extend": "#f58518",
            "owned": "#b279a2", "locked": "#9d9d9d", "inspect": "#bab0ac",
            "leader": "#bab0ac"}
_LANE, _WIDTH, _LEFT = 22, 1400, 90


def _section(title: str, ops: Sequence[Operation], marked: set[int]) -> str:
    if not ops:
        return ""
    start = min(op.invoked for op in ops)
    end = max([op.invoked for op in ops]
              + [op.completed for op in ops if op.completed is not None])
    span = max(end - start, 1e-6) * 1.02
    clients = sorted({op.client for op in ops})
    lane = {client: row for row, client in enumerate(clients)}
    height = _LANE * len(clients) + 30

    def x(moment: float) -> float:
        return _LEFT + (min(moment, start + span) - start) / span * (_WIDTH - _LEFT - 10)

    parts = [f'<h2>{html.escape(title)}</h2>',
             f'<svg width="{_WIDTH}" height="{height}" font-family="monospace" font-size="11">']
    for client, row in lane.items():
        parts.append(f'<text x="4" y="{row * _LANE + 15}">client {client}</text>')
    for index, op in enumerate(ops):
        left, right = x(op.invoked), x(op.latest if not math.isinf(op.latest) else start + span)
        row = lane[op.client]
        colour = _COLOURS.get(op.kind, "#888")
        outline = ' stroke="red" stroke-width="2"' if index in marked else ""
        dashed = ' stroke-dasharray="3,2" fill-opacity="0.4"' if op.completed is None else ""
        parts.append(
            f'<rect x="{left:.1f}" y="{row * _LANE + 3}" width="{max(right - left, 1.5):.1f}" '
            f'height="{_LANE - 6}" fill="{colour}"{outline}{dashed}><title>'
            f'#{index} client {op.client} {html.escape(op.describe())} '
            f'[{op.invoked:.3f} s .. {"?" if op.completed is None else f"{op.completed:.3f} s"}]'
            "</title></rect>")
    parts.append(f'<text x="{_LEFT}" y="{height - 6}">{start:.3f} s</text>')
    parts.append(f'<text x="{_WIDTH - 80}" y="{height - 6}">{start + span:.3f} s</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def render_timeline(history: Sequence[Operation], report: Report) -> str:
    """The page for ``history`` checked as ``report``."""
    sections = []
    for violation in report.violations:
        excerpt = violation.excerpt
        ops = violation.operations
        window = (min(ops[i].invoked for i in excerpt),
                  max(min(ops[i].latest, ops[i].invoked + 60) for i in excerpt))
        shown = [i for i, op in enumerate(ops)
                 if op.latest >= window[0] and op.invoked <= window[1]][:MAX_CALLS]
        keep = {old: new for new, old in enumerate(shown)}
        sections.append(_section(
            f"{violation.primitive} {violation.name}: no valid order (excerpt in red)",
            [ops[i] for i in shown], {keep[i] for i in excerpt if i in keep}))
    if not report.violations:
        by_name: dict[tuple[str, str], list[Operation]] = {}
        for op in history:
            by_name.setdefault(op.key, []).append(op)
        for (primitive, name), calls in sorted(by_name.items()):
            calls.sort(key=lambda op: op.invoked)
            sections.append(_section(f"{primitive} {name}", calls[:MAX_CALLS], set()))
    return ("<!doctype html><html><head><meta charset='utf-8'><title>tenure verify</title>"
            "</head><body style='font-family: sans-serif'>"
            f"<h1>{html.escape(report.summary())}</h1>" + "\n".join(sections)
            + "</body></html>\n")


def write_timeline(path: pathlib.Path, history: Sequence[Operation], report: Report) -> None:
    path.write_text(render_timeline(history, report), encoding="utf-8")
