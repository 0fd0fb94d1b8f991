"""The benchmark's plots (benchmarks/plots.py, `benchmarks/run.py --plots`): results files
written by the suite itself, from rows its figures build, plotted as SVG; bad files refused
by name."""

from __future__ import annotations

import importlib
import json
import random
import statistics
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.once

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "benchmarks" / "run.py"
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(autouse=True)
def _matplotlib() -> None:
    """The plots need matplotlib (requirements-bench.txt, in the newest major's environment)."""
    pytest.importorskip("matplotlib", reason="requirements-bench.txt is not installed here")


@pytest.fixture(scope="module")
def bench() -> Iterator[Any]:
    """``importlib.import_module`` of the benchmarks' modules, with the repository on the path."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(ROOT))
        yield lambda name: importlib.import_module(f"benchmarks.{name}")


class _Made:
    """Made-up measurements, shaped as each figure's own samples and trials."""

    def __init__(self, bench: Any, seed: int) -> None:
        self.bench = bench
        self.rng = random.Random(seed)

    def trials(self, low: float, high: float) -> Any:
        """fig_interrupt's trials of one client at one stage, latencies in [low, high] s."""
        module = self.bench("fig_interrupt")
        latencies = [self.rng.uniform(low, high) for _ in range(40)]
        return module.Trials(
            RuntimeError, [module.Outcome(s, RuntimeError("interrupted"), True) for s in latencies]
        )

    def stalls(self, variant: str, kind: str, low: float, high: float) -> list[Any]:
        """fig_stall's outcomes of one client and kind of stall, lateness in [low, high] s."""
        module = self.bench("fig_stall")
        late = [self.rng.uniform(low, high) for _ in range(30)]
        return [
            module.Outcome(variant, kind, s, s + 1e-4, module.CHUNKS, True, False) for s in late
        ]

    def reads(self, sample: Any, costs: dict[str, float], rounds: int, amount: int) -> Any:
        """Timed reads (a ``Sample(wall, cpu, amount)`` class) of each client, round by round."""
        return {
            v: [
                sample(c * self.rng.uniform(0.95, 1.05), c * self.rng.uniform(0.9, 1.0), amount)
                for _ in range(rounds)
            ]
            for v, c in costs.items()
        }

    def streams(self, n: int, cpu: float, rss: float) -> list[Any]:
        """async_load's samples of ``n`` streams: two rounds of ``cpu`` s, ``rss`` bytes a stream."""
        return [
            self.bench("async_load").Sample(
                cpu=cpu * self.rng.uniform(0.9, 1.1),
                wall=12.0,
                peak_open=n,
                failed=0,
                chunks=21 * n,
                open_s=5.0,
                first_end_s=8.0,
                gc_s=0.5,
                gen2=3,
                gen2_s=0.2,
                rss_growth=int(rss * n),
            )
            for _ in range(2)
        ]

    def threads(self, cpu: float, watchdog: bool) -> list[Any]:
        """fig_sync_scale's samples of 1,000 streams on as many threads."""
        return [
            self.bench("fig_sync_scale").Sample(
                cpu=cpu * self.rng.uniform(0.9, 1.1),
                wall=20.0,
                peak_open=1_000,
                failed=0,
                chunks=21_000,
                open_s=4.0,
                gen2=2,
                gen2_s=0.1,
                gc_s=0.4,
                extra_threads=["hermes-transport-watchdog"] if watchdog else [],
            )
            for _ in range(3)
        ]


def _rows(bench: Any, seed: int) -> dict[str, list[Any]]:
    """Rows of each figure the plots draw, built by the figures' own code from made-up
    measurements."""
    made = _Made(bench, seed)
    interrupt, stall, throughput = (
        bench("fig_interrupt"),
        bench("fig_stall"),
        bench("fig_throughput"),
    )
    scale, sync, websocket = (
        bench("fig_async_scale"),
        bench("fig_sync_scale"),
        bench("fig_websocket"),
    )
    stalls = [
        o
        for kind in ("silent", "comments")
        for v, low, high in (("watchdog", 5e-4, 3e-3), ("seed", 3e-3, 0.3))
        for o in made.stalls(v, kind, low, high)
    ]
    stalls += made.stalls("plain", "silent", -2e-4, 3e-3)  # early: a symmetric-log time axis
    sizes = {
        load: {
            "plain": made.streams(load.streams, 0.004 * load.streams, 30_000),
            "watchdog": made.streams(load.streams, 0.0045 * load.streams, 39_000),
        }
        for load in scale.FULL
    }
    summaries = [bench("async_rows").summarize(load, load.streams, s) for load, s in sizes.items()]
    shared = {
        "plain": made.streams(1_000, 4.0, 30_000),
        "watchdog": made.streams(1_000, 4.4, 38_000),
    }
    turns = made.reads(websocket.Sample, {"plain": 1.0, "watchdog": 1.02}, 3, 2_000)
    return {
        "throughput": [
            throughput._row(
                key,
                f"figure {key}",
                kind,
                made.reads(
                    throughput.Sample, {"plain": 1.0, "watchdog": 1.3, "seed": 1.05}, 2, 1_000
                ),
            )
            for key, kind in (("1a", "raw"), ("1b", "openai"))
        ],
        "interrupt": [
            interrupt._row("new", made.trials(2e-4, 1e-3), made.trials(2e-3, 0.3), ""),
            interrupt._row(
                "reused", made.trials(2e-4, 1e-3), None, "n/a: no socket before headers"
            ),
            interrupt._row("mid", made.trials(2e-4, 1e-3), made.trials(2e-3, 0.3), ""),
        ],
        "stall": [
            stall._row(kind, stalls, "never: 3/3 streams ran", [])
            for kind in ("silent", "comments")
        ],
        "async": [bench("fig_async").row(bench("fig_async").FULL[0], 1_000, shared)],
        "async_scale": [
            *(scale._size_row(s, sizes[s.load]) for s in summaries),
            scale._flat_row(summaries),
        ],
        "sync_scale": [
            sync._row(
                sync.FULL,
                1_000,
                {"plain": made.threads(8.0, False), "watchdog": made.threads(8.4, True)},
            )
        ],
        "gemini": [
            bench("fig_gemini")._row(
                made.reads(throughput.Sample, {"plain": 1.0, "watchdog": 1.01}, 2, 500), 500
            )
        ],
        "websocket": [websocket._cost_row("sync", websocket._Cost(turns, []), websocket.FULL)],
    }


@pytest.fixture(scope="module")
def results(bench: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A results file per flavor, written by the suite (``run_suite``) as run.py has it write
    one, each figure's rows built by its own code from made-up measurements."""
    suite = bench("suite")
    where = tmp_path_factory.mktemp("results")
    files = {}
    for seed, flavor in enumerate(("httpx", "httpx2")):
        rows = _rows(bench, seed)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(suite, "FLAVOR", flavor)
            patch.setattr(suite, "_run_figure", lambda name, _quick, rows=rows: rows[name])
            files[flavor] = where / f"{flavor}.json"
            assert suite.run_suite(list(rows), False, files[flavor]) == 0
    return files


def _run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """``benchmarks/run.py`` with these arguments, by this interpreter (which has matplotlib,
    so it plots without the benchmark environment)."""
    command = [sys.executable, str(RUN), *map(str, args)]
    return subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )


def _texts(path: Path) -> str:
    """Every text of an SVG file (it must parse as XML), its whitespace made single spaces
    (a title or caption of several lines is several text elements)."""
    root = ET.parse(path).getroot()
    assert root.tag == f"{SVG}svg"
    return " ".join(" ".join("".join(e.itertext()) for e in root.iter(f"{SVG}text")).split())


def _p50_p99(bench: Any, document: dict[str, Any], key: str, client: str) -> str:
    """A row's p50 / p99 of a client, as the plots' legends write them (the table's format)."""
    data = next(r for r in document["rows"] if r["key"] == key)["data"][client]
    return " / ".join(bench("measure").fmt_ms(data[p]) for p in ("p50", "p99"))


def test_run_py_plots_two_flavors_results_as_four_svg_files_with_their_titles_series_and_numbers(
    bench: Any, results: dict[str, Path], tmp_path: Path
) -> None:
    """`run.py --plots DIR --from A --from B` writes the four SVG plots, each parsing as XML, titled, with a series per client and flavor, the runs' own percentiles and ratios, and the runs named in the caption."""
    done = _run(
        "--plots", tmp_path / "plots", "--from", results["httpx"], "--from", results["httpx2"]
    )
    assert done.returncode == 0, done.stderr
    names = ["interrupt", "stall", "ratios", "cost_per_stream"]
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == sorted(
        f"{n}.svg" for n in names
    )
    assert done.stdout.count("plot: ") == 4
    texts = {name: _texts(tmp_path / "plots" / f"{name}.svg") for name in names}
    documents = {f: json.loads(p.read_text(encoding="utf-8")) for f, p in results.items()}
    for title in (
        "Interrupt latency through the openai SDK",
        "2a: before the headers, new connection",
        "2b: before the headers, reused connection",
        "2c: mid-stream, after the first chunk",
        "target: p99 < 5 ms",
        "p50 / p99 (ms)",
    ):
        assert title in texts["interrupt"]
    assert "seed model: n/a, no socket" in texts["interrupt"]  # 2b: the seed has no trials
    for title in (
        "Stall-detection lateness",
        "3a: silent server",
        "3b: keep-alive comments only",
        "plain: never detected",
        "target: p99 < 20 ms",
    ):
        assert title in texts["stall"]
    for flavor, document in documents.items():
        for key in ("2a", "2b", "2c"):
            assert (
                f"watchdog, {flavor}: {_p50_p99(bench, document, key, 'watchdog')}"
                in texts["interrupt"]
            )
        for key in ("2a", "2c"):
            assert (
                f"seed model, {flavor}: {_p50_p99(bench, document, key, 'seed')}"
                in texts["interrupt"]
            )
        for key, client, name in (
            ("3a", "plain", "plain, read timeout"),
            ("3a", "watchdog", "watchdog"),
            ("3b", "seed", "seed model"),
        ):
            assert f"{name}, {flavor}: {_p50_p99(bench, document, key, client)}" in texts["stall"]
        rows = {r["key"]: r["data"] for r in document["rows"]}
        for ratio in (
            rows["1a"]["ratio"]["watchdog"],
            rows["1a"]["cpu_ratio"]["watchdog"],
            rows["6c/250"]["ratio"],
            rows["9a"]["cpu_ratio"],
            rows["8"]["cpu_ratio"],
        ):
            assert f"{ratio:.2f}x" in texts["ratios"]
        assert f"flavor {flavor}" in texts["ratios"]
        assert f"flavor {flavor}: CPU time a stream" in texts["cost_per_stream"]
        for key in ("6c/250", "6c/10,000"):  # what the watchdog adds a stream, CPU and memory
            cpu = {
                v: statistics.median(x["cpu"] for x in rows[key]["samples"][v])
                for v in ("plain", "watchdog")
            }
            memory = rows[key]["memory_per_stream_bytes"]
            assert (
                f"{(cpu['watchdog'] - cpu['plain']) / rows[key]['streams'] * 1e6:+,.0f} µs"
                in texts["cost_per_stream"]
            )
            assert (
                f"{(memory['watchdog'] - memory['plain']) / 1024:+.1f} KiB"
                in texts["cost_per_stream"]
            )
        when = f"{flavor}: full run of {document['date'][:10]} {document['date'][11:16]} UTC at"
        for name in names:
            assert when in texts[name]  # the caption
    assert texts["stall"].count("plain, read timeout,") == 2  # 3a only: none on keep-alives
    for label in (
        "1a raw SSE, 64 KiB reads",
        "6a async, 1,000 on one client",
        "6c/10,000 async, a client a stream",
        "6d sync, 1,000 threads, one client",
        "8 Gemini, google-genai SDK",
        "9a WebSocket, sync SDK",
        "CPU time only",
    ):
        assert label in texts["ratios"]
    assert "6c async" not in texts["ratios"]  # the flat-cost row has no ratio
    for label in (
        "async, a client per stream (6c)",
        "async, shared clients (6a, 6b)",
        "sync, threads sharing a client (6d)",
        "peak resident set a stream (KiB)",
    ):
        assert label in texts["cost_per_stream"]


def test_the_same_results_give_byte_identical_plots(
    bench: Any, results: dict[str, Path], tmp_path: Path
) -> None:
    """Plotting the same files twice writes the same bytes: no date, ids from a fixed salt."""
    plots = bench("plots")
    first = plots.write_plots([results["httpx"], results["httpx2"]], tmp_path / "a")
    second = plots.write_plots([results["httpx"], results["httpx2"]], tmp_path / "b")
    assert [p.name for p in first] == [p.name for p in second] == [f"{n}.svg" for n in plots.PLOTS]
    for a, b in zip(first, second, strict=True):
        assert a.read_bytes() == b.read_bytes()
    assert b"<dc:date>" not in first[0].read_bytes()


def test_a_run_of_some_figures_gets_only_their_plots(
    results: dict[str, Path], tmp_path: Path
) -> None:
    """Results of `--only gemini` have a ratio and nothing else: only ratios.svg is written."""
    document = json.loads(results["httpx"].read_text(encoding="utf-8"))
    document["rows"] = [r for r in document["rows"] if r["key"] == "8"]
    only = tmp_path / "gemini.json"
    only.write_text(json.dumps(document), encoding="utf-8")
    done = _run("--plots", tmp_path / "plots", "--from", only)
    assert done.returncode == 0, done.stderr
    assert [p.name for p in (tmp_path / "plots").iterdir()] == ["ratios.svg"]
    assert "8 Gemini, google-genai SDK" in _texts(tmp_path / "plots" / "ratios.svg")


def _broken(document: dict[str, Any], how: str) -> str:
    if how == "not JSON":
        return '{"rows": ['
    if how == "no rows":
        return json.dumps({"flavor": "httpx", "date": document["date"]})
    if how == "not a document":
        return "[1, 2]"
    row = next(r for r in document["rows"] if r["key"] == "2a")
    row["data"]["watchdog"]["samples_s"] = "fast"
    return json.dumps(document)


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("not JSON", "not JSON"),
        ("no rows", "no list of rows"),
        ("not a document", "no list of rows"),
        ("bad samples", "row 2a: data.watchdog.samples_s is not a list of numbers"),
    ],
)
def test_a_malformed_results_file_is_refused_naming_the_file(
    results: dict[str, Path], tmp_path: Path, how: str, said: str
) -> None:
    """A file that is not run.py's results, or whose row lacks its numbers, exits 1 with one line naming the file and what is wrong, and writes no plot."""
    bad = tmp_path / "bad.json"
    bad.write_text(
        _broken(json.loads(results["httpx"].read_text(encoding="utf-8")), how), encoding="utf-8"
    )
    done = _run("--plots", tmp_path / "plots", "--from", results["httpx2"], "--from", bad)
    assert done.returncode == 1
    assert done.stderr.startswith(f"plots: {bad}: ")
    assert said in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "plots").exists()


def test_a_missing_results_file_is_refused_naming_the_file(tmp_path: Path) -> None:
    """`--from` a file that does not exist exits 1 and says which, writing nothing."""
    missing = tmp_path / "results" / "httpx.json"
    done = _run("--plots", tmp_path / "plots", "--from", missing)
    assert (done.returncode, done.stderr) == (1, f"plots: {missing}: no such results file\n")
    assert not (tmp_path / "plots").exists()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--from", "a.json"), "--from needs --plots DIR"),
        (("--plots", "out", "--from", "a.json", "--quick"), "it measures nothing: drop --quick"),
        (("--plots", "out", "--from", "a.json", "--flavor", "httpx2"), "drop --flavor"),
        (("--plots", "out", "--from", "a.json", "--json", "b.json"), "drop --json"),
    ],
)
def test_from_is_refused_with_what_only_a_measurement_takes(
    args: tuple[str, ...], said: str
) -> None:
    """`--from` plots saved results: without `--plots`, or with a measuring option, run.py exits 2 saying so before anything else."""
    done = _run(*args)
    assert done.returncode == 2
    assert said in done.stderr
