"""The shipped model end to end: its drafter loads, and it writes subject lines through the service and client."""

from pathlib import Path

from litestar.testing import TestClient

from jev import Client, Decider
from jev.engine.drafters.dspark import DSparkDrafter
from jev.serve import ServeSettings, create_app
from schemas.mail import MailDecision
from tests.test_serve_support import wait_ready

MODEL = Path(__file__).resolve().parent.parent / "models" / "default"
MAIL = {"body": "Hi all,\n\nthe meeting moved to Tuesday; the agenda is attached.\n\nThanks, Ann"}


def test_the_default_model_writes_subject_lines_through_the_service_and_the_client() -> None:
    decider = Decider.load(MODEL)
    assert isinstance(decider.drafter, DSparkDrafter)
    local = decider.decide(MailDecision, MAIL)
    with TestClient(create_app(decider, ServeSettings(max_wait_ms=1))) as http:
        wait_ready(http.get)
        remote = Client(str(http.base_url), http_client=http).decide(MailDecision, MAIL)
    assert remote.value == local.value and remote.value.subject.strip()
    assert remote.usage.generated_tokens == local.usage.generated_tokens > 0
    assert remote.usage.accepted_length >= 1.0
    assert remote.usage.forward_passes < 1 + 1 + remote.usage.generated_tokens + 1
