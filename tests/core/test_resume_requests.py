"""Tests for which streams are resumable and the requests that resume or cancel them
(``resumable_for``, ``Resumable``), ``refusal``, ``spliceable``, and the resume budget
(``StreamPolicy.resumes``, ``cancel_on_interrupt``, ``Call.take_resume``)."""

from __future__ import annotations

import contextvars
import json
from typing import Any
from urllib.parse import quote

import pytest

from hermes_transport._core.calls import Call, bind_call, call_for_request
from hermes_transport._core.policy import StreamPolicy
from hermes_transport._core.resume import (
    CANCEL_TIMEOUT,
    Resumable,
    refusal,
    resumable_for,
    spliceable,
)
from hermes_transport._core.wire_paths import wire_of

from _support import Flavor, streaming_json

# Pure logic: the same under every openai major (see the `once` marker).
pytestmark = pytest.mark.once

BASE = "https://api.example.test/v1"
RESUMES = "HERMES_STREAM_RESUMES"
BACKGROUND = json.dumps({"model": "m", "input": "hi", "stream": True, "background": True})
HEADERS = [
    ("Authorization", "Bearer sk-test"),
    ("Content-Type", "application/json"),
    ("X-Dup", "1"),
    ("Transfer-Encoding", "chunked"),
    ("x-dup", "2"),
    ("OpenAI-Beta", "responses=v1"),
]
# What a resume or a cancel carries of HEADERS: all but the body's, in order, with httpx's Host.
KEPT = [
    (b"Host", b"api.example.test"),
    (b"Authorization", b"Bearer sk-test"),
    (b"X-Dup", b"1"),
    (b"x-dup", b"2"),
    (b"OpenAI-Beta", b"responses=v1"),
]
TIMEOUT = {"connect": 5.0, "read": 60.0, "write": 5.0, "pool": 5.0}
EXTENSIONS = {"timeout": TIMEOUT, "sni_hostname": "api.example.test"}


def request(flavor: Flavor, method: str, url: str, body: str | None = None) -> Any:
    """A request of the flavor, as a client sends it: headers, a body, a timeout extension."""
    content = None if body is None else body.encode()
    ext = dict(EXTENSIONS)
    return flavor.http.Request(method, url, headers=HEADERS, content=content, extensions=ext)


def resumable(flavor: Flavor, method: str, url: str, body: str | None = None) -> Resumable | None:
    """What ``resumable_for`` says of that request, on the wire its path speaks."""
    sent = request(flavor, method, url, body)
    return resumable_for(sent, wire_of(sent.url.path), streaming_json(sent.content), flavor.http)


def created(flavor: Flavor, url: str = BASE + "/responses?api-version=2025-04-01") -> Resumable:
    stream = resumable(flavor, "POST", url, BACKGROUND)
    assert stream is not None
    return stream


# --------------------------------------------------------------------------- resumable_for


def test_a_background_stream_creation_is_resumable(flavor: Flavor) -> None:
    """A streaming POST /v1/responses with "background": true is resumable from its start: its id is not known yet."""
    sent = request(flavor, "POST", BASE + "/responses", BACKGROUND)
    stream = resumable_for(sent, "responses", streaming_json(sent.content), flavor.http)
    assert stream == Resumable(sent, None, -1, flavor.http)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/responses", '{"stream": true, "background": false}'),
        ("/responses", '{"stream": true}'),
        ("/responses", '{"stream": true, "background": "true"}'),
        ("/responses", '{"stream": true, "background": 1}'),
        ("/responses", '{"stream": true, "background": true'),
        ("/responses", '["background", true]'),
        ("/responses", "background"),
        ("/responses", ""),
        ("/responses", None),
        ("/chat/completions", BACKGROUND),
        ("/messages", BACKGROUND),
        ("/responses/resp_1/cancel", BACKGROUND),
        ("/completions", BACKGROUND),
    ],
    ids=repr,
)
def test_other_posts_are_not_resumable(flavor: Flavor, path: str, body: str | None) -> None:
    """Without "background": true in a JSON body (false, missing, not JSON, no body), or on another path, a stream is not resumable."""
    assert resumable(flavor, "POST", BASE + path, body) is None


def test_a_background_body_on_another_wire_is_not_resumable(flavor: Flavor) -> None:
    """A background body on /responses is not resumable when the request is taken for another wire."""
    sent = request(flavor, "POST", BASE + "/responses", BACKGROUND)
    for wire in ("chat_completions", "messages", "generic"):
        assert resumable_for(sent, wire, streaming_json(sent.content), flavor.http) is None


@pytest.mark.parametrize(
    ("query", "after"),
    [
        ("?stream=true&starting_after=7", 7),
        ("?starting_after=0&stream=true", 0),
        ("?stream=true", -1),
        ("?stream=true&starting_after=-3", -1),
        ("?api-version=2025-04-01&stream=true&starting_after=12", 12),
    ],
)
def test_a_resume_get_is_resumable_after_its_own_starting_after(
    flavor: Flavor, query: str, after: int
) -> None:
    """The caller's own GET /v1/responses/{id}?stream=true is resumable: its id from the path, its starting_after (or -1) as where it began."""
    for path in ("/responses/resp_1", "/responses/resp_1/"):
        stream = resumable(flavor, "GET", BASE + path + query)
        assert stream is not None
        assert (stream.response_id, stream.after) == ("resp_1", after)


@pytest.mark.parametrize("query", ["", "?starting_after=7", "?stream=false", "?stream=True"])
def test_a_get_without_stream_true_is_not_resumable(flavor: Flavor, query: str) -> None:
    """A GET of a response without stream=true (a retrieve) is not resumable."""
    assert resumable(flavor, "GET", BASE + "/responses/resp_1" + query) is None


# --------------------------------------------------------------------------- the resume request


@pytest.mark.parametrize("slash", ["", "/"], ids=["responses", "responses-slash"])
def test_the_resume_request_asks_for_the_events_after_n(flavor: Flavor, slash: str) -> None:
    """Resuming a creation (posted to /responses or /responses/) GETs /responses/{id} with stream=true and starting_after=N after the original query, the original headers less the body's, and a copy of its extensions."""
    stream = created(flavor, BASE + "/responses" + slash + "?api-version=2025-04-01")
    resume = stream.resume_request("resp_1", 7)
    assert resume.method == "GET"
    assert str(resume.url).startswith(BASE + "/responses/resp_1?")
    assert resume.url.params.multi_items() == [
        ("api-version", "2025-04-01"),
        ("stream", "true"),
        ("starting_after", "7"),
    ]
    assert resume.headers.raw == KEPT
    assert resume.extensions == EXTENSIONS
    resume.extensions["timeout"] = {}
    assert stream.request.extensions["timeout"] == TIMEOUT, "a copy of the original's"
    assert resume.read() == b""


def test_resuming_a_resume_replaces_its_starting_after(flavor: Flavor) -> None:
    """Resuming the caller's own resume GET keeps its path and other parameters and replaces its starting_after."""
    url = BASE + "/responses/resp_1?api-version=x&stream=true&starting_after=3"
    stream = resumable(flavor, "GET", url)
    assert stream is not None
    resume = stream.resume_request("resp_1", 9)
    assert resume.url.path == "/v1/responses/resp_1"
    assert sorted(resume.url.params.multi_items()) == [
        ("api-version", "x"),
        ("starting_after", "9"),
        ("stream", "true"),
    ]
    assert resume.headers.raw == KEPT


# --------------------------------------------------------------------------- the cancel request


@pytest.mark.parametrize(
    ("method", "url", "body"),
    [
        ("POST", BASE + "/responses?api-version=2025-04-01", BACKGROUND),
        (
            "GET",
            BASE + "/responses/resp_1?api-version=2025-04-01&stream=true&starting_after=4",
            None,
        ),
    ],
    ids=["creation", "resume-get"],
)
def test_the_cancel_request_posts_to_cancel_within_its_own_timeout(
    flavor: Flavor, method: str, url: str, body: str | None
) -> None:
    """The cancel POSTs /responses/{id}/cancel with the original query but stream and starting_after, the original headers less the body's, and every timeout CANCEL_TIMEOUT."""
    stream = resumable(flavor, method, url, body)
    assert stream is not None
    cancel = stream.cancel_request("resp_1")
    assert cancel.method == "POST"
    assert cancel.url.path == "/v1/responses/resp_1/cancel"
    assert cancel.url.params.multi_items() == [("api-version", "2025-04-01")]
    assert cancel.extensions["timeout"] == dict.fromkeys(
        ("connect", "read", "write", "pool"), CANCEL_TIMEOUT
    )
    assert cancel.extensions["sni_hostname"] == "api.example.test"
    assert stream.request.extensions["timeout"] == TIMEOUT, "the original's are untouched"
    assert cancel.read() == b""
    # httpx itself says an empty POST's length.
    assert [h for h in cancel.headers.raw if h[0].lower() != b"content-length"] == KEPT
    assert cancel.headers.get_list("content-length") in ([], ["0"])


@pytest.mark.parametrize("response_id", ["resp_1", "resp 1", "resp/1"])
def test_an_id_that_needs_quoting_is_the_same_id_everywhere(
    flavor: Flavor, response_id: str
) -> None:
    """An id with characters a path must quote names the same response in the resume, in the cancel, and when the resume GET is read back."""
    stream = created(flavor)
    quoted = "/v1/responses/" + quote(response_id, safe="")
    resume = stream.resume_request(response_id, 2)
    assert resume.url.raw_path.split(b"?")[0] == quoted.encode()
    cancel = stream.cancel_request(response_id)
    assert cancel.url.raw_path.split(b"?")[0] == (quoted + "/cancel").encode()
    again = resumable_for(resume, "responses", None, flavor.http)
    assert again is not None
    assert again.response_id == response_id


# --------------------------------------------------------------------------- refusal, spliceable

_OPENAI_ERROR = b'{"error": {"message": "No response resp_1.", "type": "invalid_request_error"}}'


@pytest.mark.parametrize(
    ("status", "body", "said"),
    [
        (404, _OPENAI_ERROR, "404 No response resp_1."),
        (400, b'{"message": "too old to stream"}', "400 too old to stream"),
        (502, b"  Bad gateway\n", "502 Bad gateway"),
        (503, b"x" * 500, "503 " + "x" * 200),
        (500, b"caf\xc3\xa9 \xff", "500 caf\u00e9 \ufffd"),
        (404, b"", "404"),
        (400, b"{}", "400"),
        (400, b'{"error": "nope"}', "400"),
        (400, b'{"error": {"message": 5}}', "400"),
        (400, b"[1, 2]", "400"),
    ],
    ids=repr,
)
def test_refusal_says_the_status_and_the_servers_message(
    status: int, body: bytes, said: str
) -> None:
    """A refusal reads as the status and the server's message: an OpenAI error's, a top-level one, or plain text cut to 200 characters; with none, just the status."""
    assert refusal(status, body) == said


def test_only_an_identity_body_is_spliceable() -> None:
    """Only an uncompressed body (no or an identity Content-Encoding) can be spliced with a resumed one."""
    assert all(spliceable(coding) for coding in ("", "identity", " Identity "))
    assert not any(spliceable(coding) for coding in ("gzip", "br", "deflate", "gzip, identity"))


# --------------------------------------------------------------------------- the policy


def _build(**fields: Any) -> StreamPolicy:  # any types: the validation is under test
    return StreamPolicy(**fields)


def test_resume_defaults() -> None:
    """By default a call may resume 3 times and an interrupt cancels a resumable response."""
    policy = StreamPolicy()
    assert (policy.resumes, policy.cancel_on_interrupt) == (3, True)
    assert StreamPolicy(resumes=0, cancel_on_interrupt=False).resumes == 0


@pytest.mark.parametrize("value", [-1, True, False, 1.5, "3", None], ids=repr)
def test_invalid_resumes_raise_naming_the_field(value: object) -> None:
    """A negative, bool, float, str or None resumes raises ValueError naming the field."""
    with pytest.raises(ValueError, match=r"^resumes must be an int >= 0"):
        _build(resumes=value)


@pytest.mark.parametrize("value", [1, 0, None, "yes"], ids=repr)
def test_invalid_cancel_on_interrupt_raises_naming_the_field(value: object) -> None:
    """A cancel_on_interrupt that is not True or False (1, 0, None, a str) raises ValueError naming the field."""
    with pytest.raises(ValueError, match=r"^cancel_on_interrupt must be True or False"):
        _build(cancel_on_interrupt=value)


@pytest.mark.parametrize(("raw", "resumes"), [("0", 0), (" 5 ", 5), ("12", 12), ("", 3), (" ", 3)])
def test_from_env_reads_the_resumes(raw: str, resumes: int) -> None:
    """HERMES_STREAM_RESUMES sets resumes (padding allowed; empty keeps the default) and nothing else."""
    policy = StreamPolicy.from_env({RESUMES: raw})
    assert policy == StreamPolicy(resumes=resumes)


@pytest.mark.parametrize("raw", ["-1", "1.5", "abc", "+3", "\u00b3", "\uff13", "1_0", "3 3"])
def test_from_env_malformed_resumes_raise_naming_the_variable(raw: str) -> None:
    """A negative, fractional, signed, non-ASCII or non-numeric HERMES_STREAM_RESUMES raises ValueError naming the variable and its value."""
    with pytest.raises(ValueError, match=RESUMES) as info:
        StreamPolicy.from_env({RESUMES: raw})
    assert repr(raw.strip()) in str(info.value)


def test_from_env_overrides_of_the_resume_fields_win_and_are_validated() -> None:
    """Keyword overrides of resumes and cancel_on_interrupt beat the variable and are validated as the constructor does."""
    policy = StreamPolicy.from_env({RESUMES: "5"}, resumes=1, cancel_on_interrupt=False)
    assert (policy.resumes, policy.cancel_on_interrupt) == (1, False)
    with pytest.raises(ValueError, match="resumes"):
        StreamPolicy.from_env({}, resumes=-1)
    with pytest.raises(ValueError, match="cancel_on_interrupt"):
        StreamPolicy.from_env({}, cancel_on_interrupt=None)


# --------------------------------------------------------------------------- the call's budget


def test_take_resume_spends_the_budget_and_counts_the_resumes() -> None:
    """Each resume taken spends one of the call's resumes and is counted; when none is left it is refused, and re-sends are untouched."""
    call = Call(2, resumes=2)
    assert [call.take_resume() for _ in range(4)] == [True, True, False, False]
    assert (call.resumes_left, call.resumed, call.resends_left) == (0, 2, 2)
    assert Call(1).take_resume() is False, "a call without a resume budget never resumes"


def test_call_for_request_gives_a_call_its_resumes_shared_by_its_retries() -> None:
    """A first try gets a call with the given resumes; the SDK's retry of it shares what is left; the next first try starts afresh."""

    def calls() -> tuple[Call, Call, Call]:
        first = call_for_request({}, 1, 4)
        assert first.take_resume()
        retry = call_for_request({"x-stainless-retry-count": "1"}, 1, 4)
        return first, retry, call_for_request({"x-stainless-retry-count": "0"}, 1, 4)

    first, retry, fresh = contextvars.copy_context().run(calls)
    assert retry is first
    assert (retry.resumes_left, retry.resumed) == (3, 1)
    assert fresh is not first
    assert (fresh.resumes_left, fresh.resumed) == (4, 0)


def test_a_runners_call_keeps_its_own_resumes() -> None:
    """Under a runner every request draws on the runner's call, whatever resumes it asks for."""

    def under_runner() -> Call:
        with bind_call(Call(1, resumes=2)):
            return call_for_request({}, 5, 7)

    call = contextvars.copy_context().run(under_runner)
    assert (call.resends_left, call.resumes_left) == (1, 2)
