"""Validates answers of agl's Agent Lightning API with AL v1.0's pydantic
schemas (schemas.py here) in strict JSON mode, as TestALReplay collected
them: argv[1] is a JSON list of {"kind": …, "body": <answer text>}.
The response models AL's routes declare (RolloutDetail, TerminalRolloutsPage,
PauseStateResponse) are restated from agentlightning/server/routes."""

import json
import sys

from pydantic import BaseModel, TypeAdapter

from schemas import Event, Model, Rollout, RolloutState


class RolloutDetail(BaseModel):
    rollout: Rollout
    attempts: list[str]


class TerminalRolloutItem(BaseModel):
    rollout_id: str
    state: RolloutState
    data_id: str
    is_train: bool


class TerminalRolloutsPage(BaseModel):
    items: list[TerminalRolloutItem]
    next_after: int
    total_terminal: int


class PauseStateResponse(BaseModel):
    paused: bool
    retry_after_seconds: int
    reason: str | None
    inflight: int


KINDS = {
    "rollouts": list[Rollout],
    "detail": RolloutDetail,
    "events": list[Event],
    "event": Event,
    "models": list[Model],
    "terminal": TerminalRolloutsPage,
    "pause": PauseStateResponse,
}

failures = 0
counts = {}
for item in json.load(open(sys.argv[1])):
    counts[item["kind"]] = counts.get(item["kind"], 0) + 1
    try:
        TypeAdapter(KINDS[item["kind"]]).validate_json(item["body"], strict=True)
    except Exception as e:
        failures += 1
        print(f"{item['kind']}: {e}\n{item['body'][:2000]}", file=sys.stderr)
print(json.dumps(counts, sort_keys=True))
sys.exit(1 if failures else 0)
