"""Figure 8: a long Gemini stream through google-genai, with and without the watchdog.

``client.models.generate_content_stream(...)`` reads a stream of small chunks (one text
part each) from the fault server's gemini wire (``…/models/bench:streamGenerateContent``,
coalesced into 64 KiB writes), on a ``genai.Client`` of the run's HTTP library: plain (the
SDK's own client, on the library's own transport) against ``genai_client_for`` (180 s
stale budget). The discipline is figure 1's (``fig_throughput``): each round opens one
stream per client, takes each to its first chunk untimed, then reads them in alternating
turns of ``SLICE`` chunks on this one thread, each turn timed (wall clock and CPU) for
its own client; the figure is the ratio of the medians over the rounds. Target: figure
1b's (the watch's cost under an SDK), for wall time and for CPU time. The raw Gemini
wire is figure 7g (``fig_wires``).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from hermes_transport import StreamPolicy, genai_client_for
from hermes_transport.testing import Scenario

from .fig_throughput import TARGETS, Sample, _round, _Stream
from .flavor import FLAVOR, http
from .measure import fmt_s
from .progress import say
from .report import Row, Verdict
from .server import ServerProcess
from .variants import Variant

__all__ = ["run"]

POLICY = StreamPolicy(stale_timeout=180.0)
CLIENTS: tuple[Variant, ...] = ("plain", "watchdog")
SLICE = 100
MODEL = "bench"


@dataclass(frozen=True)
class Sizes:
    events: int
    rounds: int


FULL = Sizes(events=50_000, rounds=4)
QUICK = Sizes(events=5_000, rounds=1)


def _client(variant: Variant, root: str) -> Any:
    from google import genai
    from google.genai import types

    options = types.HttpOptions(base_url=root, timeout=600_000)
    if variant == "watchdog":
        return genai_client_for(
            None, flavor=FLAVOR, policy=POLICY, api_key="b", http_options=options
        )
    # The SDK's own client, on the run's library's own transport (which picks the library).
    options.client_args = {"transport": http.HTTPTransport()}
    return genai.Client(api_key="b", http_options=options)


def _gemini(variant: Variant, url: str) -> Callable[[_Stream], Iterator[object]]:
    root = url.removesuffix("/v1")

    def units(stream: _Stream) -> Iterator[object]:
        client = _client(variant, root)
        try:
            for _chunk in client.models.generate_content_stream(model=MODEL, contents="hi"):
                stream.amount += 1
                yield None
            yield _Stream.END
        finally:
            client.close()

    return units


def _row(samples: dict[Variant, list[Sample]], events: int) -> Row:
    wall = {v: statistics.median(s.wall for s in runs) for v, runs in samples.items()}
    cpu = {v: statistics.median(s.cpu for s in runs) for v, runs in samples.items()}
    ratio, cpu_ratio = wall["watchdog"] / wall["plain"], cpu["watchdog"] / cpu["plain"]
    amounts = {s.amount for runs in samples.values() for s in runs}
    target = TARGETS["openai"]
    verdict: Verdict = "PASS" if max(ratio, cpu_ratio) <= target and len(amounts) == 1 else "MISS"
    per_round = [
        w.wall / p.wall for w, p in zip(samples["watchdog"], samples["plain"], strict=True)
    ]
    return Row(
        key="8",
        figure=(
            f"Gemini through google-genai (generate_content_stream): {events:,} chunks after"
            f" the first, median of {len(per_round)} (x plain)"
        ),
        cells={
            "watchdog": f"{fmt_s(wall['watchdog'])} ({ratio:.3f}x); CPU"
            f" {fmt_s(cpu['watchdog'])} ({cpu_ratio:.3f}x)",
            "plain": f"{fmt_s(wall['plain'])}; CPU {fmt_s(cpu['plain'])}",
            "seed": "n/a",
        },
        target=f"watchdog/plain <= {target:.2f}x",
        verdict=verdict,
        data={"ratio": ratio, "cpu_ratio": cpu_ratio, "per_round_ratio": per_round},
        notes=[
            "watchdog/plain wall time, round by round: " + ", ".join(f"{r:.3f}" for r in per_round)
        ]
        + (
            [] if len(amounts) == 1 else [f"the clients read different amounts: {sorted(amounts)}"]
        ),
    )


def run(quick: bool) -> list[Row]:
    """One row: the Gemini SDK's stream, watchdog against plain."""
    sizes = QUICK if quick else FULL
    scenario = Scenario(content=("x",) * sizes.events, write_size=64 * 1024, usage=False)
    samples: dict[Variant, list[Sample]] = {v: [] for v in CLIENTS}
    with ServerProcess(Scenario(content=("x",) * 200, usage=False)) as server:
        _round(_gemini, server.url(), CLIENTS, SLICE)  # warm both up, untimed
        server.set_scenario(scenario)
        for number in range(sizes.rounds):
            order = CLIENTS if number % 2 == 0 else CLIENTS[::-1]
            for variant, sample in _round(_gemini, server.url(), order, SLICE).items():
                samples[variant].append(sample)
            say(f"gemini: round {number + 1}/{sizes.rounds}")
    return [_row(samples, sizes.events)]
