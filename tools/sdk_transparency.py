#!/usr/bin/env python3
"""SDK transparency check: the SDKs' own tests give the same results on the watchdog.

For one openai major, this runs the client and streaming tests that the
*installed* openai SDK and the installed anthropic SDK ship in their source
distributions (``tests/test_client.py`` and ``tests/test_streaming.py`` of
each), and the tests of the installed google-genai SDK that need no network
(``GENAI_FILES``: client construction, HTTP options, request building, the
httpx / httpx2 clients, retries, streaming, errors; shipped in its wheel as
``google/genai/tests``), each suite twice: once plainly, and once with every
httpx / httpx2 client that the
tests and the SDKs build put on the watchdog (``tools/watchdog_everywhere.py``,
a pytest plugin: each client's transport becomes
``WatchdogTransport(inner=<the transport the client would have used>)``,
respx-mocked, ``MockTransport`` and test-built clients included). Then it
compares the outcome of every test id. They must be the same, apart from
``KNOWN_DIFFERENCES`` below (tests that read transport internals), each listed
with why and matched by test id *and* error message, so that another failure
of the same test is still caught. A difference not explained is run again,
both ways, with only the other differing tests: one that differs again fails
the check (exit 1) and is printed, grouped by kind, with its error; one that
does not is reported as flaky and does not fail it. A run that crashes, runs no test, or (on the
watchdog) wraps no transport fails the check too.

    python3 tools/sdk_transparency.py --major 1          # the SDKs of .venvs/openai1
    python3 tools/sdk_transparency.py --major 3 --suite anthropic --verbose
    python3 tools/sdk_transparency.py --major 3 --suite genai
    python3 tools/sdk_transparency.py --major 2 --json report.json
    python3 tools/sdk_transparency.py --major 3 --package-dir DIR  # DIR/hermes_transport instead

``tools/run_tests.py`` runs it once per major, after that major's own tests.

The *installed* SDKs are those of the project's test environment
``.venvs/openai<major>`` (made by ``tools/run_tests.py``). Their tests run in a
separate environment, ``.venvs/sdk-openai<major>``, so that the SDKs' test
dependencies never reach the project's own runs. It holds the same versions of
openai, anthropic, google-genai, httpx, httpx2 and their runtime dependencies
(``PINNED``, from the project environment), this project (editable), the SDKs'
``aiohttp`` extras (google-genai's ``httpx`` one too), and the test dependencies
the SDKs name in their own dev requirements, those their tests load
(``TEST_DEPENDENCIES``; google-genai's, whose wheel has no such list: pytest and
pytest-asyncio), plus pytest-timeout. The sdists
come from the package registry (``pip download --no-binary :all: --no-deps``);
only their ``tests/`` and ``pyproject.toml`` are unpacked, so the tests import
the installed SDK, under the SDK's own pytest configuration. google-genai's tests
need no sdist: they run where the SDK is installed (site-packages), with a
``pytest.ini`` of the check's own (``GENAI_PYTEST_INI``), so that neither this
project's pytest settings nor a test's relative imports go astray; the tests that
replay recorded API sessions (not shipped) or call the API are not among
``GENAI_FILES``, and ``GENAI_DESELECT`` / ``GENAI_KEYWORD`` leave out a few more,
each for its reason. The environment is
rebuilt only when a version or this recipe changes, with the installer the test command
chose (uv; ``INSTALLER_VARIABLE``), or pip when run on its own. Nothing else uses the
network: the tests mock every request (respx, ``MockTransport``, mocked
transports) or serve it on loopback; none needs the SDKs' mock API server. On
openai 3.x the openai suite runs with ``OPENAI_TEST_LEGACY_HTTPX=1``, the SDK's
own lane that adds its legacy-httpx streaming tests.
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the hooks below run inside the SDK environment's pytest
    import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOLS = Path(__file__).resolve().parent
RECIPE = 1  # bump to rebuild every SDK environment
# The install command's head (JSON) that tools/run_tests.py chose: uv's; unset or []: pip.
INSTALLER_VARIABLE = "HERMES_TEST_INSTALLER"

# Runtime packages pinned to the project environment's versions.
PINNED = (
    "openai",
    "anthropic",
    "httpx",
    "httpcore",
    "httpx2",
    "httpcore2",
    "h11",
    "anyio",
    "sniffio",
    "pydantic",
    "pydantic-core",
    "typing-extensions",
    "distro",
    "jiter",
    "certifi",
    "idna",
    "google-genai",
    "google-auth",
    "requests",
    "tenacity",
    "websockets",
    "truststore",
)
# The SDKs' dev requirements, less type checkers, linters, stubs and cloud SDKs:
# what their client and streaming tests (and conftests) import or load.
TEST_DEPENDENCIES = frozenset(
    {
        "pytest",
        "pytest-asyncio",
        "pytest-xdist",
        "respx",
        "dirty-equals",
        "inline-snapshot",
        "time-machine",
        "rich",
        "trio",
        "nest-asyncio",
        "importlib-metadata",
        "hypothesis",
        "http-snapshot",
        "packaging",
    }
)
# The harness's own: a hung test fails alone instead of stalling the check.
HARNESS_DEPENDENCIES = ("pytest-timeout",)
TEST_FILES = ("tests/test_client.py", "tests/test_streaming.py")
TEST_TIMEOUT = 60  # seconds per test
RUN_TIMEOUT = 300  # seconds per pytest session
RERUN_LIMIT = 80  # more differing tests than this are systematic: not run again
RERUN_BATCH = 6  # differing tests per session (about) when they are run again
RESULTS_VARIABLE = "SDK_TRANSPARENCY_RESULTS"
REPORT_VARIABLE = "WATCHDOG_EVERYWHERE_REPORT"  # read by tools/watchdog_everywhere.py
# Variables that would change what the SDKs or the watchdog do, dropped for the tests.
AMBIENT = re.compile(
    r"(OPENAI_|ANTHROPIC_|HERMES_|AWS_|AZURE_|GOOGLE_|PYTEST_|TEST_API_)"
    r"|((HTTPS?|ALL|NO|WSS?|FTP)_PROXY|SSL_CERT_(FILE|DIR)|REQUESTS_CA_BUNDLE|CURL_CA_BUNDLE)$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Suite:
    """One SDK's tests to compare, with the extra environment they run under."""

    name: str  # the suite, and the SDK distribution whose sdist ships the tests
    env: Mapping[str, str] = field(default_factory=dict)
    files: tuple[str, ...] = TEST_FILES  # what pytest runs
    # The SDK distribution, when not ``name``; the extras installed with it.
    distribution: str = ""
    extras: str = "aiohttp"
    # Tests its wheel ships (``files`` are paths in site-packages) instead of its sdist.
    in_wheel: bool = False
    requirements: tuple[str, ...] = ()  # test dependencies not named in a pyproject
    deselect: tuple[str, ...] = ()  # test ids (or prefixes) left out, each for a reason
    keyword: str = ""  # a ``-k`` expression: the tests chosen by name

    @property
    def sdk(self) -> str:
        return self.distribution or self.name


# google-genai's tests, in its wheel: the client (construction, HTTP options, request
# building, the httpx / httpx2 / aiohttp clients, retries, streaming, closing), the
# errors and the common helpers. Every request is mocked (the transports'
# ``send``/``handle_request``, ``MockTransport``, aiohttp's ``_request``) or served on
# loopback. The other directories replay recorded API sessions, which the wheel does
# not ship, or call the API.
GENAI_TESTS = "google/genai/tests/"
GENAI_FILES = tuple(GENAI_TESTS + name for name in ("client", "errors", "common"))
# Sleeps through tenacity's real back-off (1+2+4+8 s), with no HTTP client at all.
GENAI_DESELECT = (GENAI_TESTS + "client/test_retries.py::test_retry_wait",)
# The aiohttp client's tests: no httpx / httpx2 client sends their requests, so the
# watchdog changes nothing in them; several sleep through real retry back-off, and
# one (test_aiohttp_retries_failed_request_retries_unsuccessfully_mtls) connects to
# aiplatform.googleapis.com.
GENAI_KEYWORD = "not aiohttp"
# pytest's configuration for google-genai's tests (upstream's is not in the wheel): not
# this project's (setup.cfg, found above the environment), and ``google.genai.tests``
# imported as such, ``google`` being a namespace package.
GENAI_PYTEST_INI = """\
[pytest]
consider_namespace_packages = true
asyncio_mode = strict
asyncio_default_fixture_loop_scope = function
"""


def suites_for(major: str) -> list[Suite]:
    # openai 3.x tests the legacy httpx client in a lane of its own: the variable
    # only adds the tests that take either library (test_streaming's http_module).
    openai_env = {"OPENAI_TEST_LEGACY_HTTPX": "1"} if major == "3" else {}
    genai = Suite(
        "genai",
        files=GENAI_FILES,
        distribution="google-genai",
        extras="aiohttp,httpx",
        in_wheel=True,
        requirements=("pytest", "pytest-asyncio"),
        deselect=GENAI_DESELECT,
        keyword=GENAI_KEYWORD,
    )
    return [Suite("openai", openai_env), Suite("anthropic"), genai]


@dataclass(frozen=True)
class Known:
    """A difference the watchdog is allowed to make, and why."""

    suite: str
    test: str  # fnmatch pattern on the test id
    message: str  # regex searched in the watchdog run's error message
    reason: str


# The transport a test found is the watchdog: "isinstance(<...WatchdogTransport
# object" from a class check, "assert 'hermes_transport...' == 'httpx2'" from a
# check of its module.
_TRANSPORT_CLASS = (
    r"isinstance\(<hermes_transport\.[\w.]*WatchdogTransport object"
    r"|assert 'hermes_trans[^']*' == 'httpx2?'"
)
# Tests that read transport internals: they find the watchdog where they look
# for httpx's own transport.
KNOWN_DIFFERENCES: tuple[Known, ...] = (
    Known(
        "openai",
        "tests/test_client.py::Test*::test_retrying_*_errors_doesnt_leak",
        _TRANSPORT_CLASS,
        "counts open connections in client._client._transport._pool, asserting first that"
        " the transport is an httpx (Async)HTTPTransport (2.x and 3.x: or a class of the"
        " httpx2 module); on the watchdog that pool is its inner transport's",
    ),
    Known(
        "anthropic",
        "tests/test_client.py::Test*::test_retrying_*_errors_doesnt_leak",
        _TRANSPORT_CLASS,
        "as openai's: counts open connections in client._client._transport._pool, asserting"
        " first that the transport is an httpx2 (Async)HTTPTransport",
    ),
    Known(
        "anthropic",
        "tests/test_client.py::test_default_client_proxy_arguments_beat_environment*",
        _TRANSPORT_CLASS,
        "takes client._transport_for_url(url), asserts it is an httpx2 (Async)HTTPTransport"
        " and reads its pool's proxy URL and socket options; on the watchdog they are on its"
        " inner transport, which the client built exactly as without it",
    ),
)


@dataclass(frozen=True)
class Category:
    """A kind of difference, for the report: known or not is ``KNOWN_DIFFERENCES``' call."""

    name: str
    message: str = ""  # regex searched in the watchdog run's error message
    test: str = "*"  # fnmatch pattern on the test id

    def matches(self, test: str, message: str) -> bool:
        return fnmatch.fnmatchcase(test, self.test) and bool(re.search(self.message, message))


# The first that matches names a difference's group.
CATEGORIES: tuple[Category, ...] = (
    Category("transport internals: a test reads the client's transport", _TRANSPORT_CLASS),
    Category("redirects: a redirected request's body is not read", r"RequestNotRead"),
    Category(
        "a test patched the HTTP library's transport classes with a mock",
        r"isinstance\(\) arg 2 must be a type",
    ),
    Category("httpx2 transport refused (alias_httpx)", r"runs on httpx2?, but inner is an"),
    Category(
        "inner transport not entered or exited", r"__a?enter__|__a?exit__|not entered|entered"
    ),
    Category(
        "response rebuilt: identity, read state or .request lost",
        r"ResponseNotRead|StreamConsumed|\.request\b|is_closed|is_stream_consumed| is <",
    ),
    Category(
        "first-event gate: a body error before the first event is raised by the request,"
        " so the SDK re-sends it and create() raises",
        test="*before-first-event*",
    ),
    Category("leaked resources (warnings are errors)", r"ResourceWarning|Unraisable|unclosed"),
    Category("a test hung", r"Timeout \(>\d"),
)


# --- the recorder: loaded into each SDK test run as ``-p sdk_transparency`` ---

_recording = {"on": False}


def pytest_configure(config: pytest.Config) -> None:
    """Record in the process that reports (never in an xdist worker)."""
    _recording["on"] = bool(os.environ.get(RESULTS_VARIABLE)) and not hasattr(
        config, "workerinput"
    )


def _crash_message(longrepr: object) -> str:
    if longrepr is None:
        return ""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (path, line, reason)
        return str(longrepr[2])
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message)
    lines = [line for line in str(longrepr).splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("E ")]
    return "\n".join(errors[:8]) if errors else (lines[-1] if lines else "")


def _record(entry: dict[str, str]) -> None:
    with open(os.environ[RESULTS_VARIABLE], "a", encoding="utf-8") as results:
        results.write(json.dumps(entry) + "\n")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not _recording["on"]:
        return
    outcome: str = report.outcome
    if hasattr(report, "wasxfail"):
        outcome = "xfailed" if outcome == "skipped" else "xpassed"
    message = _crash_message(report.longrepr) if outcome != "passed" else ""
    _record({"id": report.nodeid, "when": report.when, "outcome": outcome, "message": message})


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if _recording["on"] and report.failed:
        message = _crash_message(report.longrepr)
        _record({"id": report.nodeid, "when": "collect", "outcome": "failed", "message": message})


# --- the check ---


@dataclass(frozen=True)
class Result:
    """One test's outcome in one run: ``passed``, ``failed``, ``error``, ``skipped``, ..."""

    outcome: str
    message: str = ""


def read_results(path: Path) -> dict[str, Result]:
    """Per test id, its outcome from the recorded reports of its phases.

    A failed setup is ``error``; otherwise the call's outcome, with
    ``+teardown error`` when teardown failed. A module that failed to collect
    is one ``collection error``, under the module's id.
    """
    phases: dict[str, dict[str, dict[str, str]]] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            phases.setdefault(entry["id"], {})[entry["when"]] = entry
    results = {}
    for test, seen in phases.items():
        if "collect" in seen:
            results[test] = Result("collection error", seen["collect"]["message"])
            continue
        setup, call, teardown = seen.get("setup"), seen.get("call"), seen.get("teardown")
        if setup is not None and setup["outcome"] != "passed":
            outcome = "error" if setup["outcome"] == "failed" else setup["outcome"]
            result = Result(outcome, setup["message"])
        elif call is not None:
            result = Result(call["outcome"], call["message"])
        else:
            result = Result("not run")
        if teardown is not None and teardown["outcome"] == "failed":
            messages = (result.message, teardown["message"])
            result = Result(
                f"{result.outcome}+teardown error", "\n".join(m for m in messages if m)
            )
        results[test] = result
    return results


@dataclass
class Run:
    """One pytest session over a suite's tests: plain or on the watchdog."""

    suite: Suite
    watchdog: bool
    tests: Sequence[str]  # files or test ids
    workdir: Path
    label: str
    returncode: int | None = None
    seconds: float = 0.0
    results: dict[str, Result] = field(default_factory=dict)
    wrapped: Counter[str] = field(default_factory=Counter)

    @property
    def name(self) -> str:
        return f"{self.suite.name} ({'watchdog' if self.watchdog else 'plain'})"

    @property
    def log(self) -> Path:
        return self.workdir / f"{self.label}.log"

    @property
    def results_file(self) -> Path:
        return self.workdir / f"{self.label}.jsonl"

    @property
    def wrapped_dir(self) -> Path:
        return self.workdir / f"{self.label}.wrapped"


def _python(env_dir: Path) -> Path:
    return env_dir / ("Scripts" if os.name == "nt" else "bin") / "python"


def _say(message: str) -> None:
    print(message, flush=True)


def _run_quiet(cmd: Sequence[str], what: str) -> str:
    """Run a preparation step; on failure show its output and stop."""
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        sys.stdout.write(result.stdout[-4000:] + result.stderr[-4000:])
        raise SystemExit(f"sdk_transparency: {what} failed (exit {result.returncode})")
    return result.stdout


_VERSIONS = """
import json, sys
from importlib import metadata
def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
names = json.loads(sys.argv[1])
print(json.dumps({"python": sys.version_info[:2], "packages": {n: version(n) for n in names}}))
"""


def installed_versions(python: Path) -> tuple[list[int], dict[str, str]]:
    """The Python version of ``python``'s environment, and its versions of ``PINNED``."""
    out = _run_quiet([str(python), "-c", _VERSIONS, json.dumps(PINNED)], "reading versions")
    found = json.loads(out)
    packages = {name: v for name, v in found["packages"].items() if v is not None}
    return list(found["python"]), packages


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _toml_loads(text: str) -> dict[str, Any]:
    """``tomllib.loads`` (Python 3.11+), else the TOML parser pip vendors."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        from pip._vendor import tomli as tomllib  # type: ignore[no-redef]
    data: dict[str, Any] = tomllib.loads(text)
    return data


def dev_requirements(pyproject: Path) -> list[str]:
    """The requirements in an sdist's dev dependencies that are ``TEST_DEPENDENCIES``."""
    data = _toml_loads(pyproject.read_text(encoding="utf-8"))
    declared = list(data.get("dependency-groups", {}).get("dev", []))  # PEP 735
    declared += data.get("tool", {}).get("rye", {}).get("dev-dependencies", [])
    chosen = []
    for requirement in declared:
        if not isinstance(requirement, str):  # an include-group table
            continue
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
        if match and _normalize(match.group(1)) in TEST_DEPENDENCIES:
            chosen.append(requirement.strip())
    return chosen


def unpack_tests(archive: Path, destination: Path) -> None:
    """Unpack an sdist's ``tests/`` and ``pyproject.toml``, not its sources, as ``destination``."""
    with tarfile.open(archive) as sdist:
        members = []
        for member in sdist.getmembers():
            parts = Path(member.name).parts
            wanted = len(parts) > 1 and (parts[1] == "tests" or parts[1:] == ("pyproject.toml",))
            if wanted and ".." not in parts and (member.isfile() or member.isdir()):
                members.append(member)
        if not members:
            raise SystemExit(f"sdk_transparency: {archive.name} has no tests/")
        top = Path(members[0].name).parts[0]
        staging = Path(tempfile.mkdtemp(dir=destination.parent))
        if hasattr(tarfile, "data_filter"):
            sdist.extractall(staging, members=members, filter="data")
        else:  # pragma: no cover - Pythons before the extraction filters
            sdist.extractall(staging, members=members)  # members checked above
    (staging / top).rename(destination)
    staging.rmdir()


@dataclass(frozen=True)
class Environment:
    """The SDK test environment of one major, and where each suite's tests are."""

    python: Path
    versions: Mapping[str, str]
    # Suite name -> where its pytest runs: the unpacked sdist, or site-packages (in_wheel).
    suites: Mapping[str, Path]
    package_dir: Path | None = None  # a directory whose hermes_transport the tests import
    configs: Mapping[str, Path] = field(default_factory=dict)  # suite -> its pytest.ini


_PURELIB = "import sysconfig; print(sysconfig.get_paths()['purelib'])"


def prepare(major: str, all_suites: Iterable[Suite]) -> Environment:
    """Build (or reuse) ``.venvs/sdk-openai<major>`` for the SDKs of ``.venvs/openai<major>``."""
    project_python = _python(ROOT / ".venvs" / f"openai{major}")
    if not project_python.exists():
        raise SystemExit(
            f"sdk_transparency: no .venvs/openai{major}; make it with:"
            f" python3 tools/run_tests.py --major {major}"
        )
    python_version, versions = installed_versions(project_python)
    present = [suite for suite in all_suites if suite.sdk in versions]
    directory = ROOT / ".venvs" / f"sdk-openai{major}"
    python = _python(directory)
    unpacked = {s.name: directory / "suites" / f"{s.name}-{versions[s.sdk]}" for s in present}
    # A wheel's tests have no sdist: their directory holds the pytest.ini they run with.
    configs = {s.name: unpacked[s.name] / "pytest.ini" for s in present if s.in_wheel}
    wheel_suites = [[s.name, s.sdk, s.extras, *s.requirements] for s in present if s.in_wheel]
    recipe = [RECIPE, PINNED, sorted(TEST_DEPENDENCIES), HARNESS_DEPENDENCIES, python_version]
    recipe += [wheel_suites, GENAI_PYTEST_INI]
    sdks = [suite.sdk for suite in present]
    stamp = json.loads(json.dumps({"recipe": recipe, "versions": versions, "sdks": sdks}))
    stamp_file = directory / "transparency-stamp.json"
    try:
        fresh = json.loads(stamp_file.read_text(encoding="utf-8")) == stamp
    except (OSError, ValueError):
        fresh = False
    if fresh and python.exists() and all(path.is_dir() for path in unpacked.values()):
        return _environment_of(python, versions, present, unpacked, configs)

    started = time.monotonic()
    _say(f"sdk_transparency: building .venvs/sdk-openai{major} ...")
    shutil.rmtree(directory, ignore_errors=True)
    # Made by the project environment's interpreter: the same Python.
    _run_quiet([str(project_python), "-m", "venv", str(directory)], "creating the environment")
    pip = [str(python), "-m", "pip", "--disable-pip-version-check"]
    (directory / "suites").mkdir()
    requirements: set[str] = set()
    for suite in present:
        if suite.in_wheel:  # its tests come with the SDK's install below
            unpacked[suite.name].mkdir()
            configs[suite.name].write_text(GENAI_PYTEST_INI, encoding="utf-8")
            requirements.update(suite.requirements)
            continue
        sdk = suite.sdk
        sdists = directory / "sdists" / sdk
        spec = f"{sdk}=={versions[sdk]}"
        download = [*pip, "download", "--quiet", "--no-binary", ":all:", "--no-deps"]
        _run_quiet([*download, "--dest", str(sdists), spec], f"downloading the {spec} sdist")
        archives = sorted(sdists.glob("*.tar.gz"))
        if len(archives) != 1:
            raise SystemExit(f"sdk_transparency: no single sdist of {spec} in {sdists}")
        unpack_tests(archives[0], unpacked[suite.name])
        for name in suite.files:
            if not (unpacked[suite.name] / name).is_file():
                raise SystemExit(f"sdk_transparency: the {spec} sdist ships no {name}")
        requirements.update(dev_requirements(unpacked[suite.name] / "pyproject.toml"))
    constraints = directory / "constraints.txt"
    constraints.write_text("".join(f"{n}=={v}\n" for n, v in sorted(versions.items())), "utf-8")
    wanted = [f"{s.sdk}[{s.extras}]=={versions[s.sdk]}" for s in present]
    wanted += [f"httpx2=={versions['httpx2']}"] if "httpx2" in versions else []
    install = [*_installer(python), "--constraint", str(constraints), "--editable", "."]
    command = [*install, *wanted, *sorted(requirements), *HARNESS_DEPENDENCIES]
    try:
        _run_quiet(command, "installing the SDK test environment")
    except SystemExit:
        # The index as a cache or a mirror sees it may lag the one the project environment
        # was resolved against minutes before (a release just out): once more, afresh.
        _say("sdk_transparency: the install failed; trying once more with a fresh index")
        fresh = "--refresh" if "uv" in Path(install[0]).name else "--no-cache-dir"
        _run_quiet([*command, fresh], "installing the SDK test environment (again)")
    environment = _environment_of(python, versions, present, unpacked, configs)
    for suite in present:
        for name in suite.files if suite.in_wheel else ():
            if not (environment.suites[suite.name] / name).exists():
                spec = f"{suite.sdk}=={versions[suite.sdk]}"
                raise SystemExit(f"sdk_transparency: the {spec} wheel ships no {name}")
    stamp_file.write_text(json.dumps(stamp, indent=1), encoding="utf-8")
    took = time.monotonic() - started
    _say(f"sdk_transparency: .venvs/sdk-openai{major} built in {took:.0f} s")
    return environment


def _environment_of(
    python: Path,
    versions: Mapping[str, str],
    present: Sequence[Suite],
    unpacked: Mapping[str, Path],
    configs: Mapping[str, Path],
) -> Environment:
    """The environment, its wheel-shipped suites running in its site-packages."""
    suites = dict(unpacked)
    if configs:
        purelib = Path(_run_quiet([str(python), "-c", _PURELIB], "finding site-packages").strip())
        suites.update({suite.name: purelib for suite in present if suite.in_wheel})
    return Environment(python, versions, suites, configs=configs)


def _installer(python: Path) -> list[str]:
    """The install command's head for ``python``'s environment: the one ``tools/run_tests.py``
    chose (``INSTALLER_VARIABLE``: uv's), else pip's."""
    head = json.loads(os.environ.get(INSTALLER_VARIABLE) or "[]")
    if head:
        return [*head, "--python", str(python)]
    return [str(python), "-m", "pip", "--disable-pip-version-check", "install", "--quiet"]


def _environment(environment: Environment, run: Run) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not AMBIENT.match(name)}
    env.update(run.suite.env)
    paths = [TOOLS] if environment.package_dir is None else [environment.package_dir, TOOLS]
    env["PYTHONPATH"] = os.pathsep.join(map(str, paths))  # the two plugins (and --package-dir)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env[RESULTS_VARIABLE] = str(run.results_file)
    if run.watchdog:
        env[REPORT_VARIABLE] = str(run.wrapped_dir)
    return env


def _command(environment: Environment, run: Run) -> list[str]:
    plugins = ["-p", "sdk_transparency"] + (["-p", "watchdog_everywhere"] if run.watchdog else [])
    config = environment.configs.get(run.suite.name)
    # A wheel's tests: its own pytest.ini, and the test ids relative to site-packages.
    configuration = ["-c", str(config), "--rootdir", "."] if config is not None else []
    deselected = [f"--deselect={test}" for test in run.suite.deselect]
    deselected += ["-k", run.suite.keyword] if run.suite.keyword else []
    return [
        str(environment.python),
        "-m",
        "pytest",
        *plugins,
        "-p",
        "no:cacheprovider",
        "-n",  # after the SDK's own "-n auto": one process, the runs go side by side
        "0",
        "-q",
        "-rN",
        "--continue-on-collection-errors",
        f"--timeout={TEST_TIMEOUT}",
        *configuration,
        *deselected,
        *run.tests,
    ]


def _start(environment: Environment, run: Run) -> subprocess.Popen[bytes]:
    run.workdir.mkdir(parents=True, exist_ok=True)
    run.results_file.unlink(missing_ok=True)
    shutil.rmtree(run.wrapped_dir, ignore_errors=True)
    if run.watchdog:
        run.wrapped_dir.mkdir()
    with open(run.log, "wb") as log:
        return subprocess.Popen(
            _command(environment, run),
            cwd=environment.suites[run.suite.name],
            env=_environment(environment, run),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: killed whole on a timeout
        )


def _finish(run: Run, code: int, seconds: float) -> None:
    run.returncode = code
    run.seconds = seconds
    run.results = read_results(run.results_file)
    for report in sorted(run.wrapped_dir.glob("*.json")) if run.watchdog else ():
        run.wrapped.update(json.loads(report.read_text(encoding="utf-8")))


def run_all(environment: Environment, runs: Sequence[Run], jobs: int) -> None:
    """Run the sessions, ``jobs`` at a time; each one's output goes to its log."""
    pending = list(runs)
    active: list[tuple[Run, subprocess.Popen[bytes], float]] = []
    try:
        while pending or active:
            while pending and len(active) < jobs:
                run = pending.pop(0)
                active.append((run, _start(environment, run), time.monotonic()))
            time.sleep(0.1)
            for entry in list(active):
                run, proc, started = entry
                code = proc.poll()
                if code is None and time.monotonic() - started > RUN_TIMEOUT:
                    os.killpg(proc.pid, signal.SIGKILL)
                    code = proc.wait()
                    with open(run.log, "a", encoding="utf-8") as log:
                        log.write(f"\nsdk_transparency: killed after {RUN_TIMEOUT} s\n")
                if code is not None:
                    active.remove(entry)
                    _finish(run, code, time.monotonic() - started)
    finally:  # interrupted (Ctrl+C): the sessions, in groups of their own, go too
        for _, proc, _ in active:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@dataclass
class Difference:
    test: str
    plain: Result
    watchdog: Result
    known: Known | None = None
    confirmed: bool | None = None  # whether it differed again alone; None: not run again

    @property
    def status(self) -> str:
        if self.known is not None:
            return "known"
        return "flaky (the same when run again)" if self.confirmed is False else "UNEXPLAINED"

    @property
    def category(self) -> str:
        message = self.watchdog.message or self.plain.message
        for category in CATEGORIES:
            if category.matches(self.test, message):
                return category.name
        return "other"


def _explain(suite: Suite, test: str, watchdog: Result) -> Known | None:
    for known in KNOWN_DIFFERENCES:
        if (
            known.suite == suite.name
            and fnmatch.fnmatchcase(test, known.test)
            and re.search(known.message, watchdog.message)
        ):
            return known
    return None


def _outcome(run: Run, test: str) -> Result:
    """``test``'s result in ``run``; a test of a module that failed to collect gets that error."""
    result = run.results.get(test)
    if result is not None:
        return result
    module = run.results.get(test.split("::")[0])
    if module is not None and module.outcome == "collection error":
        return module
    return Result("absent")


def compare(suite: Suite, plain: Run, watchdog: Run) -> list[Difference]:
    differences = []
    for test in sorted(set(plain.results) | set(watchdog.results)):
        before, after = _outcome(plain, test), _outcome(watchdog, test)
        if before.outcome != after.outcome:
            differences.append(Difference(test, before, after, _explain(suite, test, after)))
    return differences


def _problems(run: Run) -> list[str]:
    """What makes a run's results unusable: it crashed, ran nothing, or wrapped nothing."""
    problems = []
    if run.returncode not in (0, 1):  # 1: some tests failed, which is compared
        problems.append(f"{run.name}: pytest exited {run.returncode}; see {run.log}")
    if not run.results:
        problems.append(f"{run.name}: no test ran; see {run.log}")
    elif run.watchdog and not run.wrapped:
        problems.append(f"{run.name}: the plugin put no transport on the watchdog")
    return problems


@dataclass
class SuiteReport:
    suite: Suite
    version: str
    plain: Run
    watchdog: Run
    differences: list[Difference] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def tests(self) -> int:
        return len(set(self.plain.results) | set(self.watchdog.results))

    def count(self, status: str) -> int:
        return sum(1 for d in self.differences if d.status.startswith(status))

    @property
    def ok(self) -> bool:
        return not self.problems and self.count("UNEXPLAINED") == 0

    def as_json(self) -> dict[str, Any]:
        return {
            "suite": self.suite.name,
            "version": self.version,
            "tests": self.tests,
            "same": self.tests - len(self.differences),
            "seconds": {"plain": self.plain.seconds, "watchdog": self.watchdog.seconds},
            "wrapped": dict(self.watchdog.wrapped),
            "problems": self.problems,
            "differences": [
                {
                    "test": d.test,
                    "status": d.status,
                    "category": d.category,
                    "plain": d.plain.outcome,
                    "watchdog": d.watchdog.outcome,
                    "message": d.watchdog.message or d.plain.message,
                    "known_because": d.known.reason if d.known else None,
                }
                for d in self.differences
            ],
        }


def confirm(environment: Environment, reports: Sequence[SuiteReport], jobs: int) -> None:
    """Run each unexplained difference again, both ways, in batches side by side."""
    reruns: list[tuple[SuiteReport, Run, Run]] = []
    for report in reports:
        candidates = [
            d.test
            for d in report.differences
            if d.known is None
            and "absent" not in (d.plain.outcome, d.watchdog.outcome)
            and "collection error" not in (d.plain.outcome, d.watchdog.outcome)
        ]
        if len(candidates) > RERUN_LIMIT:  # clearly systematic: taken as they are
            continue
        workdir, name = report.plain.workdir, report.suite.name
        # Batches of about RERUN_BATCH tests, at most ``jobs`` of them: each session
        # costs an SDK import, and each retried test its SDK back-off.
        batches = min(jobs, -(-len(candidates) // RERUN_BATCH))
        for number in range(batches):
            batch = candidates[number::batches]
            label = f"{name}-again-{number}"
            plain = Run(report.suite, False, batch, workdir, f"{label}-plain")
            watchdog = Run(report.suite, True, batch, workdir, f"{label}-watchdog")
            reruns.append((report, plain, watchdog))
    if not reruns:
        return
    count = sum(len(plain.tests) for _, plain, _ in reruns)
    _say(f"sdk_transparency: running the {count} differing test(s) again ...")
    # The watchdog runs first: they take longest (the SDK's back-off between retries).
    run_all(environment, [w for _, _, w in reruns] + [p for _, p, _ in reruns], jobs)
    for report, plain, watchdog in reruns:
        for difference in report.differences:
            if difference.test in plain.tests:
                before = _outcome(plain, difference.test)
                after = _outcome(watchdog, difference.test)
                difference.confirmed = before.outcome != after.outcome


_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def _excerpt(message: str, prefix: str) -> str:
    lines = message.strip().splitlines()[:8] or ["(no message)"]
    return "\n".join(prefix + line[:240] for line in lines)


def print_report(reports: Sequence[SuiteReport], verbose: bool) -> None:
    for report in reports:
        plain_failing = sum(
            1
            for result in report.plain.results.values()
            if result.outcome not in ("passed", "skipped", "xfailed")
        )
        _say(
            f"\n--- {report.suite.name} {report.version}: {report.tests} tests,"
            f" {report.tests - len(report.differences)} same, {len(report.differences)}"
            f" different ({report.count('known')} known, {report.count('flaky')} flaky,"
            f" {report.count('UNEXPLAINED')} unexplained); plain {report.plain.seconds:.0f} s,"
            f" watchdog {report.watchdog.seconds:.0f} s ---"
        )
        wrapped = ", ".join(f"{n} {kind}" for kind, n in sorted(report.watchdog.wrapped.items()))
        _say(f"  transports put on the watchdog: {wrapped or 'none'}")
        if plain_failing:
            _say(f"  {plain_failing} test(s) fail without the watchdog too (compared as they are)")
        for problem in report.problems:
            _say(f"  PROBLEM: {problem}")
        groups: dict[tuple[str, str], list[Difference]] = {}
        for difference in report.differences:
            groups.setdefault((difference.status, difference.category), []).append(difference)
        for (status, category), members in sorted(
            groups.items(), key=lambda g: g[0][0] != "known"
        ):
            _say(f"  [{status}] {category}: {len(members)}")
            if status == "known":
                for reason in sorted({d.known.reason for d in members if d.known is not None}):
                    _say(f"    because the test {reason}")
                for member in members if verbose else ():
                    _say(f"      {member.test}")
                continue
            # Tests that differ the same way are listed under one error.
            same_way: dict[tuple[str, str, str], list[str]] = {}
            for member in members:
                message = _ADDRESS.sub("", member.watchdog.message or member.plain.message)
                key = (member.plain.outcome, member.watchdog.outcome, message)
                same_way.setdefault(key, []).append(member.test)
            for (plain, watchdog, message), tests in same_way.items():
                _say(f"    plain: {plain}; watchdog: {watchdog}")
                _say(_excerpt(message, "      | "))
                for test in tests:
                    _say(f"      {test}")


def check(
    major: str,
    only: Sequence[str] = (),
    jobs: int = 4,
    verbose: bool = False,
    json_path: Path | None = None,
    package_dir: Path | None = None,
) -> bool:
    """Compare the suites of one major; print the report; whether they are the same."""
    chosen = [suite for suite in suites_for(major) if not only or suite.name in only]
    # The environment holds every SDK's tests, whichever are compared this time.
    environment = prepare(major, suites_for(major))
    if package_dir is not None:
        if not (package_dir / "hermes_transport" / "__init__.py").is_file():
            raise SystemExit(f"sdk_transparency: no hermes_transport package in {package_dir}")
        environment = dataclasses.replace(environment, package_dir=package_dir.resolve())
    for suite in chosen:
        if suite.name not in environment.suites:
            _say(f"sdk_transparency: {suite.name} is not in .venvs/openai{major}: not compared")
    chosen = [suite for suite in chosen if suite.name in environment.suites]
    if not chosen:
        _say("sdk_transparency: nothing to compare")
        return False
    workdir = Path(tempfile.mkdtemp(prefix=f"sdk-transparency-{major}-"))
    reports = []
    for suite in chosen:
        version = environment.versions[suite.sdk]
        plain, watchdog = (
            Run(suite, on, suite.files, workdir, f"{suite.name}-{'watchdog' if on else 'plain'}")
            for on in (False, True)
        )
        reports.append(SuiteReport(suite, version, plain, watchdog))
    started = time.monotonic()
    versions = ", ".join(f"{report.suite.name} {report.version}" for report in reports)
    _say(f"sdk_transparency: {versions}: each suite plainly and on the watchdog ...")
    # The watchdog runs first: they take longest.
    run_all(environment, [r.watchdog for r in reports] + [r.plain for r in reports], jobs)
    for report in reports:
        report.differences = compare(report.suite, report.plain, report.watchdog)
        report.problems = _problems(report.plain) + _problems(report.watchdog)
    confirm(environment, reports, jobs)
    print_report(reports, verbose)
    report_file = json_path or workdir / "report.json"
    report_file.write_text(json.dumps([r.as_json() for r in reports], indent=1), "utf-8")
    ok = all(report.ok for report in reports)
    took = time.monotonic() - started
    verdict = "the same on the watchdog" if ok else "DIFFERENT on the watchdog"
    _say(f"\nsdk_transparency, openai {major}.x: {verdict} ({took:.0f} s)")
    if ok:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        _say(f"sdk_transparency: the runs' logs and report.json are in {workdir}")
    return ok


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--major", choices=("1", "2", "3"), required=True, help="openai major")
    parser.add_argument(
        "--suite", choices=("openai", "anthropic", "genai"), action="append", default=[]
    )
    parser.add_argument("--jobs", type=int, default=4, help="pytest sessions at once (4)")
    parser.add_argument("--verbose", action="store_true", help="list known differences too")
    parser.add_argument("--json", type=Path, help="write the report here as JSON")
    parser.add_argument(
        "--package-dir",
        type=Path,
        metavar="DIR",
        help="test the hermes_transport package in DIR instead of this checkout's"
        " (say, an older commit: git archive COMMIT hermes_transport | tar -x -C DIR)",
    )
    args = parser.parse_args(argv)
    same = check(
        args.major, args.suite, max(1, args.jobs), args.verbose, args.json, args.package_dir
    )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
