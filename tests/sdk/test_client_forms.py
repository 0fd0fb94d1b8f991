"""The README's three ways onto the watchdog, and what each keeps of the SDK's defaults.

``openai_client_for`` and the SDK's own default client class given a
``WatchdogTransport`` follow a redirect as the SDK's own client does; the bare
``httpx.Client(transport=...)`` form gets httpx's defaults and returns the
redirect to the SDK, which raises it. Each form's stream is watched all the same.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

from hermes_transport import StreamPolicy, StreamStalled, openai_client_for, stream_error
from hermes_transport.testing import FaultServer, Scenario

from _support import KW, NATIVE, OPENAI_MAJOR, load_flavor, redirector

POLICY = StreamPolicy(stale_timeout=0.5, retries=0)


def _factory(url: str) -> openai.OpenAI:
    return openai_client_for(None, policy=POLICY, base_url=url, api_key="x", max_retries=0)


def _default_class(url: str) -> openai.OpenAI:
    flavor = load_flavor(NATIVE)  # the HTTP library of openai.DefaultHttpxClient
    http_client = openai.DefaultHttpxClient(transport=flavor.WatchdogTransport(policy=POLICY))
    return openai.OpenAI(base_url=url, api_key="x", max_retries=0, http_client=http_client)


def _bare(url: str) -> openai.OpenAI:
    flavor = load_flavor(NATIVE)
    http_client = flavor.http.Client(transport=flavor.WatchdogTransport(policy=POLICY))
    return openai.OpenAI(base_url=url, api_key="x", max_retries=0, http_client=http_client)


FORMS: list[Any] = [
    pytest.param(_factory, id="openai_client_for"),
    pytest.param(_default_class, id="DefaultHttpxClient"),
    pytest.param(_bare, id="bare-httpx-Client"),
]
Form = Callable[[str], openai.OpenAI]


@pytest.mark.parametrize("form", FORMS[:2])
def test_the_sdk_defaults_follow_a_redirected_stream(form: Form, server: FaultServer) -> None:
    """The factory and the SDK's default client class stream on through a 307 of the base URL."""
    with redirector(307, server.base_url) as url, form(url) as client:
        stream = client.chat.completions.create(**KW, stream=True)
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "hello world"


def test_the_bare_form_returns_the_redirect_to_the_sdk(server: FaultServer) -> None:
    """A bare ``Client(transport=...)`` does not follow the 307: the SDK raises it as an error."""
    with redirector(307, server.base_url) as url, _bare(url) as client:
        with pytest.raises(openai.APIStatusError) as info:
            client.chat.completions.create(**KW, stream=True)
    assert info.value.status_code == 307
    assert server.requests == []  # nothing reached the server the redirect pointed to


@pytest.mark.parametrize("form", FORMS)
def test_every_form_watches_the_stream(form: Form, server: FaultServer) -> None:
    """On each form a stream that goes silent after its first event fails with our stall.

    openai 3.x wraps an error raised while iterating in ``APITimeoutError``; the
    ``StreamStalled`` is its cause there, and raised as it is on 1.x and 2.x.
    """
    server.scenario = Scenario.silent_after(1)
    with form(server.base_url) as client:
        stream = client.chat.completions.create(**KW, stream=True)
        with pytest.raises(openai.APITimeoutError if OPENAI_MAJOR >= 3 else StreamStalled) as info:
            for _ in stream:
                pass
    stall = stream_error(info.value)
    assert isinstance(stall, StreamStalled)
    assert stall.stage == "mid_stream"
