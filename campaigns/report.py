"""``reservoir campaign report RUN``: an HTML report of one campaign run.

:func:`write_report` writes ``index.html`` (inline CSS, no scripts) and its SVG plots
next to it, referenced relatively, so the directory can be copied or served as is:

- a header (campaign, machine, topology, bottleneck) and the summary table with the
  design.md section 6 targets beside the figures, met or missed;
- goodput against streams for each scenario family, iperf3 dashed and gridftp and
  xrdcp dotted beside reservoir, the bottleneck drawn in; Jain's index and CPU seconds
  per GB per scenario;
- per run: per-stream throughput over time (thin muted lines, the aggregate bold),
  cwnd with the equalizer's caps as step lines, and for failover runs the aggregate
  (and each path) with the link events marked and the lost seconds shaded. A run that
  failed shows its error instead.
"""

from __future__ import annotations

import argparse
import html
import re
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from reservoir.campaigns import _svg as svg
from reservoir.campaigns.results import (
    COLUMNS,
    TARGET_BACK_S,
    TARGET_BOTTLENECK,
    TARGET_FAILOVER_S,
    TARGET_IPERF3,
    TARGET_IPERF3_LOOPBACK,
    TARGET_JAIN,
    TARGET_PEERS,
    TARGET_PEERS_LOOPBACK,
    TARGET_PEERS_LOOPBACK_RECEIPT,
    CampaignRun,
    ResultsError,
    Run,
    Sample,
    Scenario,
    Stream,
    cell,
    format_results,
    summary_rows,
)

__all__ = ["report_html", "report_main", "write_report"]

STREAM_WIDTH = 0.9
AGGREGATE = "#1a1a1a"
EVENT_COLORS = {
    "link-down": "#c0392b",
    "link-up": "#27ae60",
    "path-failed": "#e67e22",
    "path-recovered": "#16a085",
}

TOOLS = ("reservoir", "iperf3", "gridftp", "xrdcp")
KEYS = tuple((tool, svg.color(i)) for i, tool in enumerate(TOOLS))
DASH = {"iperf3": "6 4", "gridftp": "2 3", "xrdcp": "2 3"}


def tool_color(tool: str) -> str:
    return svg.color(TOOLS.index(tool))


CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222;
       padding: 0 1em; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; }
h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
h3 { font-size: 1.05em; margin-top: 1.6em; }
table { border-collapse: collapse; font-size: 0.9em; margin: 0.6em 0; }
th, td { padding: 0.25em 0.6em; border-bottom: 1px solid #e6e6e6; text-align: right;
         white-space: nowrap; }
th { background: #f4f4f4; }
td.name, th.name { text-align: left; }
td.met { background: #e6f4ea; }
td.missed { background: #fbe4e4; }
span.target { color: #666; font-size: 0.85em; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: 0.2em 1em; }
dl.facts dt { color: #666; }
dl.facts dd { margin: 0; }
figure { margin: 1em 0; }
figure img { max-width: 100%; border: 1px solid #eee; }
pre.error { background: #fbe4e4; padding: 0.8em; white-space: pre-wrap; }
p.note { color: #666; font-size: 0.9em; }
"""


def e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _unit(peak: float) -> tuple[float, str]:
    """A divisor and its name for rates up to ``peak`` bit/s."""
    for div, name in ((1e9, "Gbit/s"), (1e6, "Mbit/s"), (1e3, "kbit/s")):
        if peak >= div:
            return div, name
    return 1.0, "bit/s"


def _bytes_unit(peak: float) -> tuple[float, str]:
    for div, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if peak >= 2 * div:
            return div, name
    return 1.0, "bytes"


def _stamp(unix: float | None) -> str:
    if unix is None:
        return "(in progress)"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(unix))


def _family_label(sc: Scenario, *, rate: bool = True) -> str:
    parts = [sc.tool, f"pacing {sc.pacing}"]
    if rate and sc.pacing_rate_bps is not None:
        div, unit = _unit(sc.pacing_rate_bps)
        parts[-1] += f" {sc.pacing_rate_bps / div:g} {unit}"
    if sc.equalizer is not None:
        parts.append("eq " + ("on" if sc.equalizer else "off"))
    if sc.verify == "receipt":  # storage: what every run before the mode did
        parts.append("verify receipt")
    parts += [sc.multilink, sc.cc]
    if sc.loss:
        parts.append(f"loss {sc.loss * 100:g}%")
    return " · ".join(parts)


class _Report:
    """The page; its plots saved as SVG files beside it, or with ``out_dir`` None
    written into the page itself (one self-contained file)."""

    def __init__(self, result: CampaignRun, out_dir: Path | None) -> None:
        self.result = result
        self.out = out_dir
        self.rows = summary_rows(result)
        self.files: list[str] = []

    def save(self, name: str, text: str) -> str:
        assert self.out is not None
        (self.out / name).write_text(text)
        self.files.append(name)
        return name

    def figure(self, name: str, text: str, alt: str) -> str:
        if self.out is None:
            body = re.sub(r"^<\?xml[^>]*\?>\s*", "", text)
            return f"<figure role='img' aria-label='{e(alt)}'>{body}</figure>"
        src = self.save(name, text)
        return f"<figure><img src='{e(src)}' alt='{e(alt)}'></figure>"

    # ------------------------------------------------------------------ page parts

    def header(self) -> str:
        r, m, topo = self.result, self.result.machine, self.result.topology
        if topo.bottleneck_bps is None:
            bottleneck = "none (loopback)" if topo.kind == "loopback" else "unknown"
        else:
            div, unit = _unit(topo.bottleneck_bps)
            bottleneck = f"{topo.bottleneck_bps / div:g} {unit}"
        facts = [
            ("run", r.run_id),
            ("started", _stamp(r.started)),
            ("finished", _stamp(r.finished)),
            ("machine", f"{m.cores} cores, kernel {m.kernel}"),
            ("congestion control", ", ".join(m.cc_available) or "-"),
            ("topology", topo.kind + (f" ({topo.spec})" if topo.spec else "")),
            ("bottleneck", bottleneck),
            ("runs", f"{len(r.runs)} ({sum(1 for x in r.runs if not x.ok)} failed)"),
        ]
        out = [f"<h1>Campaign {e(r.campaign)}</h1>", "<dl class='facts'>"]
        out += [f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in facts]
        out.append("</dl>")
        if topo.paths:
            out.append(
                "<table><tr><th class='name'>path</th><th>rate</th><th>RTT ms</th>"
                "<th>loss</th></tr>"
            )
            for p in topo.paths:
                div, unit = _unit(p.rate_bps)
                out.append(
                    f"<tr><td class='name'>{e(p.name)}</td><td>{e(f'{p.rate_bps / div:g} {unit}')}"
                    f"</td><td>{e(f'{p.rtt_ms:g}')}</td><td>{e(f'{p.loss * 100:g}%')}</td></tr>"
                )
            out.append("</table>")
        return "\n".join(out)

    def summary(self) -> str:
        head = ["scenario", "tool", "streams", "reps", *(h for _, h, _ in COLUMNS)]
        out = ["<h2>Summary</h2>", "<table>", "<tr>"]
        out += [f"<th class='{'name' if i < 2 else ''}'>{e(h)}</th>" for i, h in enumerate(head)]
        out.append("</tr>")
        for row in self.rows:
            reps = f"{row.repetitions}" + (f" ({row.errors} failed)" if row.errors else "")
            tds = [
                f"<td class='name'>{e(row.scenario)}</td>",
                f"<td class='name'>{e(row.tool)}</td>",
                f"<td>{row.streams}</td>",
                f"<td>{e(reps)}</td>",
            ]
            for key, _, _ in COLUMNS:
                text = e(cell(row, key))
                check = row.checks.get(key)
                vs = {"of_iperf3": row.baseline, "of_peers": row.peer}.get(key)
                title = f" title='vs {e(vs)}'" if vs else ""
                if check is None:
                    tds.append(f"<td{title}>{text}</td>")
                    continue
                mark = "met" if check.met else "missed"
                tds.append(
                    f"<td class='{mark}'{title}>{text} <span class='target'>"
                    f"{_target(check.target)} {'&#10003;' if check.met else '&#10007;'}</span></td>"
                )
            out.append("<tr>" + "".join(tds) + "</tr>")
        out.append("</table>")
        loop = self.result.topology.kind == "loopback"
        out.append(
            "<p class='note'>Medians over the repetitions that did not fail. Targets "
            "(design.md section 6, reservoir scenarios only; iperf3 is the baseline, gridftp "
            "and xrdcp the tools compared with): goodput "
            + (
                f"&ge; {TARGET_IPERF3_LOOPBACK:g} of iperf3 and &ge; "
                f"{TARGET_PEERS_LOOPBACK:g} of the best peer on loopback "
                f"({TARGET_PEERS_LOOPBACK_RECEIPT:g} receipt-verified)"
                if loop
                else f"&ge; {TARGET_BOTTLENECK:g} of the bottleneck, &ge; "
                f"{TARGET_IPERF3:g} of iperf3 and &ge; {TARGET_PEERS:g} of the best peer with "
                "the same streams"
            )
            + f"; Jain's index &ge; {TARGET_JAIN:g} with the equalizer on; a failed path "
            f"costs &lt; {TARGET_FAILOVER_S:g} s of aggregate throughput and is used again "
            f"&lt; {TARGET_BACK_S:g} s after it comes back. /iperf3 pairs each reservoir "
            "scenario with the iperf3 scenario of the same streams, pacing and pacing rate, "
            "congestion control and loss (whatever its multilink mode); /best-peer with "
            "the gridftp or xrdcp scenario of highest goodput with the same streams, "
            "congestion control and loss (whatever its pacing). A gridftp or xrdcp copy "
            "whose destination differed from the source is a failed run.</p>"
        )
        return "\n".join(out)

    def overview_plots(self) -> str:
        out = ["<h2>Scenarios</h2>"]
        ok_runs = [r for r in self.result.runs if r.ok]
        if ok_runs:
            out.append(
                self.figure("goodput-vs-streams.svg", self.goodput_chart(), "goodput vs streams")
            )
        bars = [(row, row.jain, tool_color(row.tool)) for row in self.rows]
        if any(v is not None for _, v, _ in bars):
            chart = svg.bar_chart(
                [svg.Bar(row.scenario, v, c) for row, v, c in bars],
                title="Jain's index per scenario (middle 60% of each run, median)",
                x_label="Jain's fairness index across streams",
                hlines=[svg.HLine(TARGET_JAIN, f"target {TARGET_JAIN:g}")],
                keys=KEYS,
                fmt=lambda v: f"{v:.3f}",
            )
            out.append(self.figure("jain.svg", chart, "Jain's index per scenario"))
        cpu = [(row, row.cpu_s_per_gb) for row in self.rows]
        if any(v is not None for _, v in cpu):
            chart = svg.bar_chart(
                [svg.Bar(row.scenario, v, tool_color(row.tool)) for row, v in cpu],
                title="CPU seconds per GB (sender + receiver, median)",
                x_label="CPU s/GB",
                keys=KEYS,
            )
            out.append(self.figure("cpu.svg", chart, "CPU seconds per GB"))
        return "\n".join(out)

    def goodput_chart(self) -> str:
        families: dict[tuple[object, ...], dict[int, list[float]]] = {}
        labels: dict[tuple[object, ...], Scenario] = {}
        for r in self.result.runs:
            if not r.ok:
                continue
            sc = r.scenario
            # the pacing rate usually follows the streams (a share each): not a family trait
            key: tuple[object, ...] = (sc.tool, sc.pacing, sc.equalizer, sc.multilink, sc.cc)
            key += (sc.loss, sc.verify)
            families.setdefault(key, {}).setdefault(sc.streams, []).append(r.goodput_bps)
            labels.setdefault(key, sc)
        bottleneck = self.result.topology.bottleneck_bps
        peak = max([max(v) for f in families.values() for v in f.values()] + [bottleneck or 0])
        div, unit = _unit(peak)
        series = []
        for i, (key, points) in enumerate(families.items()):
            xs = sorted(points)
            sc = labels[key]
            series.append(
                svg.Series(
                    _family_label(sc, rate=False),
                    [float(x) for x in xs],
                    [statistics.median(points[x]) / div for x in xs],
                    color=svg.color(i),
                    width=2.0,
                    dash=DASH.get(sc.tool),
                    markers=True,
                )
            )
        streams = sorted({float(s) for f in families.values() for s in f})
        hlines = [svg.HLine(bottleneck / div, "bottleneck")] if bottleneck else []
        return svg.line_chart(
            series,
            title="Goodput vs streams (median over repetitions; iperf3 dashed, peers dotted)",
            x_label="streams",
            y_label=f"goodput ({unit})",
            hlines=hlines,
            x_ticks=streams,
            log_x=True,
            width=980,
            height=380,
        )

    def runs(self) -> str:
        out = ["<h2>Runs</h2>", "<table><tr>"]
        names = "# scenario rep seconds GB goodput_Mbit/s CPU_s verified Jain lost_s status"
        head = [h.replace("_", " ") for h in names.split()]
        out += [f"<th class='{'name' if h == 'scenario' else ''}'>{e(h)}</th>" for h in head]
        out.append("</tr>")
        for i, r in enumerate(self.result.runs):
            verified = {None: "-", True: "yes", False: "NO"}[r.verified]
            cells = [
                f"<a href='#run-{i}'>{i}</a>",
                e(r.scenario.name),
                str(r.repetition),
                f"{r.seconds:.1f}",
                f"{r.bytes / 1e9:.2f}",
                f"{r.goodput_bps / 1e6:.1f}",
                f"{r.cpu_seconds:.1f}",
                verified,
                "-" if r.jain is None else f"{r.jain:.3f}",
                "-" if r.failover is None else f"{r.failover.lost_seconds:.2f}",
                "ok" if r.ok else "failed",
            ]
            tds = [f"<td class='{'name' if j == 1 else ''}'>{c}</td>" for j, c in enumerate(cells)]
            out.append("<tr>" + "".join(tds) + "</tr>")
        out.append("</table>")
        for i, r in enumerate(self.result.runs):
            out.append(self.run_section(i, r))
        return "\n".join(out)

    def run_section(self, i: int, r: Run) -> str:
        title = f"{r.scenario.name} · repetition {r.repetition}"
        out = [f"<h3 id='run-{i}'>{i}. {e(title)}</h3>"]
        out.append(
            f"<p class='note'>{e(_family_label(r.scenario))}, {r.scenario.streams} streams</p>"
        )
        notes = [ev.detail for ev in r.events if ev.kind == "note"]
        if notes:
            out.append(f"<p class='note'>{'; '.join(e(n) for n in notes)}</p>")
        if r.error is not None:
            out.append(f"<pre class='error'>{e(r.error)}</pre>")
            return "\n".join(out)
        if r.intervals or r.streams:
            chart = self.throughput_chart(r, title)
            out.append(self.figure(f"run{i:03d}-throughput.svg", chart, "per-stream throughput"))
        cwnd = self.cwnd_charts(i, r, title)
        out += cwnd
        if r.failover is not None or any(ev.kind in EVENT_COLORS for ev in r.events):
            chart = self.failover_chart(r, title)
            out.append(self.figure(f"run{i:03d}-failover.svg", chart, "failover window"))
        return "\n".join(out)

    def throughput_chart(self, r: Run, title: str) -> str:
        """Streams on the left axis; with several streams the aggregate reads on a right
        axis (n times the left one), so it does not squash the streams at the bottom."""
        n = len(r.streams)
        scale = float(n) if n > 1 and r.intervals else 1.0
        rates = [s.bps for st in r.streams for s in st.samples]
        peak = max([*rates, *(iv.bps / scale for iv in r.intervals), 1.0])
        div, unit = _unit(peak)
        many = n > svg.LEGEND_MAX
        series = [
            svg.Series(
                f"{st.id}" + (f" ({st.path})" if st.path else ""),
                [s.t for s in st.samples],
                [s.bps / div for s in st.samples],
                color=svg.color(k),
                width=STREAM_WIDTH if many else 1.3,
                opacity=0.75 if many else 1.0,
                legend=not many,
            )
            for k, st in enumerate(r.streams)
        ]
        if r.intervals:
            series.append(
                svg.Series(
                    "aggregate" + (" (right axis)" if scale > 1 else ""),
                    [iv.t for iv in r.intervals],
                    [iv.bps / div / scale for iv in r.intervals],
                    color=AGGREGATE,
                    width=2.6,
                )
            )
        note = f"{n} streams (thin lines)" if many else None
        return svg.line_chart(
            series,
            title=f"Throughput per stream: {title}",
            x_label="seconds",
            y_label=f"per stream ({unit})" if n > 1 else unit,
            vlines=_event_lines(r),
            y2=(scale, f"aggregate ({unit})") if scale > 1 else None,
            legend_note=note,
        )

    def cwnd_charts(self, i: int, r: Run, title: str) -> list[str]:
        streams = [st for st in r.streams if any(s.cwnd_bytes is not None for s in st.samples)]
        capped = [st for st in r.streams if any(s.cap_segments is not None for s in st.samples)]
        if not streams and not capped:
            return []
        out = []
        many = len(r.streams) > svg.LEGEND_MAX
        index = {st.id: k for k, st in enumerate(r.streams)}
        same_scale = all(st.mss_bytes for st in capped)
        values = [s.cwnd_bytes for st in streams for s in st.samples if s.cwnd_bytes is not None]
        if same_scale:
            values += [
                s.cap_segments * (st.mss_bytes or 0)
                for st in capped
                for s in st.samples
                if s.cap_segments is not None
            ]
        div, unit = _bytes_unit(max([*values, 1]))
        series = [_cwnd_series(st, svg.color(index[st.id]), div, many) for st in streams]
        caps = [
            _cap_series(st, svg.color(index[st.id]), div if same_scale else None) for st in capped
        ]
        if same_scale:
            series += caps
        note = "caps: dashed steps" if caps and same_scale else None
        if many:
            note = f"{len(streams)} streams (thin)" + ("; caps dashed steps" if note else "")
        if series:
            chart = svg.line_chart(
                series,
                title=f"cwnd{' and caps' if caps and same_scale else ''}: {title}",
                x_label="seconds",
                y_label=f"cwnd ({unit})",
                legend_note=note,
            )
            out.append(self.figure(f"run{i:03d}-cwnd.svg", chart, "cwnd over time"))
        if caps and not same_scale:
            chart = svg.line_chart(
                caps,
                title=f"Equalizer caps: {title}",
                x_label="seconds",
                y_label="cap (segments)",
                legend_note=f"{len(caps)} capped streams (steps)",
            )
            out.append(self.figure(f"run{i:03d}-caps.svg", chart, "caps over time"))
        return out

    def failover_chart(self, r: Run, title: str) -> str:
        peak = max([iv.bps for iv in r.intervals] + [1.0])
        div, unit = _unit(peak)
        series = [
            svg.Series(
                "aggregate",
                [iv.t for iv in r.intervals],
                [iv.bps / div for iv in r.intervals],
                color=AGGREGATE,
                width=2.4,
            )
        ]
        paths = sorted({st.path for st in r.streams if st.path is not None})
        if len(paths) > 1 and r.intervals:
            for k, name in enumerate(paths):
                rates = _path_rates(r, name)
                series.append(
                    svg.Series(
                        f"path {name}",
                        [iv.t for iv in r.intervals],
                        [v / div for v in rates],
                        color=svg.color(k),
                        width=1.4,
                    )
                )
        vlines = _event_lines(r)
        spans = []
        down = next((ev.t for ev in r.events if ev.kind == "link-down"), None)
        if r.failover is not None and down is not None:
            lost = r.failover.lost_seconds
            spans.append(svg.Span(down, down + lost, f"lost {lost:.2f} s"))
            up = next((ev.t for ev in r.events if ev.kind == "link-up" and ev.t >= down), None)
            if up is not None and r.failover.back_after_s is not None:
                back = r.failover.back_after_s
                vlines.append(svg.VLine(up + back, f"back +{back:.2f} s", "#2c7fb8"))
        return svg.line_chart(
            series,
            title=f"Failover: {title}",
            x_label="seconds",
            y_label=unit,
            vlines=vlines,
            spans=spans,
        )

    def page(self) -> str:
        body = [self.header(), self.summary(), self.overview_plots(), self.runs()]
        return "\n".join(
            [
                "<!DOCTYPE html>",
                "<html lang='en'><head><meta charset='utf-8'>",
                f"<title>{e(f'Campaign {self.result.campaign} ({self.result.run_id})')}</title>",
                f"<style>{CSS}</style></head><body>",
                *body,
                "</body></html>",
                "",
            ]
        )


def _target(text: str) -> str:
    return e(text).replace("&gt;=", "&ge;").replace("&lt;=", "&le;")


def _cwnd_series(st: Stream, color: str, div: float, many: bool) -> svg.Series:
    """One stream's congestion window over time, in units of ``div`` bytes (thin and
    without a legend entry when the run has many streams)."""
    return svg.Series(
        st.id,
        [s.t for s in st.samples],
        [None if s.cwnd_bytes is None else s.cwnd_bytes / div for s in st.samples],
        color=color,
        width=STREAM_WIDTH if many else 1.3,
        opacity=0.75 if many else 1.0,
        legend=not many,
    )


def _cap_series(st: Stream, color: str, div: float | None) -> svg.Series:
    """One stream's equalizer cap as dashed steps: in units of ``div`` bytes, or in
    segments where ``div`` is None (the caps are not on the cwnd chart's scale)."""
    return svg.Series(
        f"cap {st.id}",
        [s.t for s in st.samples],
        [_cap(s) if div is None else _cap(s, st.mss_bytes, div) for s in st.samples],
        color=color,
        width=1.6,
        dash="4 2",
        step=True,
        legend=False,
    )


def _cap(s: Sample, mss: int | None = 1, div: float = 1.0) -> float | None:
    """The sample's cap in segments, or times ``mss`` / ``div`` on the cwnd scale."""
    if s.cap_segments is None:
        return None
    return s.cap_segments * (mss or 1) / div


def _event_lines(r: Run) -> list[svg.VLine]:
    return [
        svg.VLine(ev.t, ev.kind + (f" {ev.detail}" if ev.detail else ""), EVENT_COLORS[ev.kind])
        for ev in r.events
        if ev.kind in EVENT_COLORS
    ]


def _mean_over(samples: list[Sample], a: float, b: float) -> float:
    """A stream's time-weighted mean rate over ``(a, b]`` (a sample covers ``(prev t, t]``)."""
    prev = 0.0
    weighted = covered = 0.0
    for s in samples:
        if prev >= b:
            break
        overlap = min(s.t, b) - max(prev, a)
        if overlap > 0:
            weighted += s.bps * overlap
            covered += overlap
        prev = s.t
    return weighted / covered if covered > 0 else 0.0


def _path_rates(r: Run, path: str) -> list[float]:
    """The summed rate of the path's streams over each aggregate interval."""
    out = []
    prev = 0.0
    for iv in r.intervals:
        out.append(sum(_mean_over(st.samples, prev, iv.t) for st in r.streams if st.path == path))
        prev = iv.t
    return out


def write_report(result: CampaignRun, out_dir: Path) -> Path:
    """Write ``index.html`` and its SVG plots into ``out_dir``; return the index path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    report = _Report(result, out_dir)
    index = out_dir / "index.html"
    index.write_text(report.page())
    return index


def report_html(result: CampaignRun) -> str:
    """The report as one self-contained HTML page (its plots inline SVG)."""
    return _Report(result, None).page()


def report_main(argv: Sequence[str] | None = None) -> int:
    """``reservoir campaign report RUN [--out DIR]``."""
    parser = argparse.ArgumentParser(
        prog="reservoir campaign report",
        description="Write an HTML report (tables and SVG plots) of a campaign run's results.",
    )
    parser.add_argument("run", type=Path, metavar="RUN", help="a campaign results JSON file")
    parser.add_argument(
        "--out", type=Path, metavar="DIR", help="output directory (default: RUN-report/ beside it)"
    )
    args = parser.parse_args(argv)
    run: Path = args.run
    try:
        result = CampaignRun.load(run)
    except ResultsError as err:
        print(f"reservoir campaign report: {err}", file=sys.stderr)
        return 2
    out_dir: Path = args.out if args.out is not None else run.with_name(run.stem + "-report")
    try:
        index = write_report(result, out_dir)
    except OSError as err:
        print(f"reservoir campaign report: {out_dir}: {err.strerror or err}", file=sys.stderr)
        return 1
    print(format_results(result))
    print(f"report: {index}")
    return 0
