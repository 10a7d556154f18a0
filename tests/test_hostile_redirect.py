"""The judge client never follows a redirect: the key and transcript stay at the configured origin."""

from __future__ import annotations

import httpx2
import pytest

from sidecar.adapters.judge_backends import CappedTransport, RedirectRefused
from sidecar.model import Outcome
from tests.builders import JUDGE_MODEL, refund_rubric, refund_transcript
from tests.gemini_server import JudgeServer, Reply, gemini_json
from tests.judge_fixtures import GOOD_VERDICTS
from tests.judge_rig import judged, service, value


@pytest.mark.parametrize("backend", ["gemini", "openai"])
@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
async def test_a_redirect_to_another_origin_is_an_error_naming_it(
    judge_server: JudgeServer, backend: str, code: int
) -> None:
    elsewhere = JudgeServer().start()
    try:
        elsewhere.script(gemini_json(GOOD_VERDICTS))
        target = f"{elsewhere.base_url}/stolen"
        judge_server.script(Reply(status=code, body={}, headers=(("Location", target),)))
        async with service(judge_server, backend) as (judge, metrics):
            result = await judged(judge, refund_rubric(), refund_transcript())
        assert elsewhere.requests == []
        assert result.error_reason == "redirect"
        assert {(c.outcome, c.reason) for c in result.criteria} == {(Outcome.ERROR, "redirect")}
        reason = {"judge_model": JUDGE_MODEL, "reason": "redirect"}
        assert value(metrics, "sidecar_judge_errors_total", **reason) == 1
    finally:
        elsewhere.stop()


async def test_the_transport_refuses_a_redirect_whatever_the_client_says() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(307, headers={"Location": "https://evil.example/x"})

    transport = CappedTransport(1024, httpx2.MockTransport(handler))
    async with httpx2.AsyncClient(transport=transport, follow_redirects=True) as client:
        with pytest.raises(RedirectRefused, match=r"evil\.example"):
            await client.post("http://judge.invalid/v1/chat/completions", json={})
