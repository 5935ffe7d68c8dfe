"""The JSON the service speaks, as msgspec Structs: shared shapes here, per-task shapes compiled once.

Each task gets its own request and response Structs compiled from its pydantic models
(`MailDecideRequest`, `MailDecided`, ...), so decoding checks the task's input shape and the
OpenAPI document shows every task's exact fields.
"""

from dataclasses import dataclass
from typing import Annotated, Any

import msgspec

from jev.schema import Decided, Task
from jev.schema.keys import keys_for, probability_key
from jev.serve.structs import StructCompiler


class ProblemItem(msgspec.Struct):
    """One located problem: `loc` is a dotted path into the request body."""

    loc: str
    msg: str


class Problem(msgspec.Struct, omit_defaults=True):
    """RFC 9457 problem details; `errors` lists every invalid field. `limit` is the limit a request went
    over: tokens for an over-long input (with its `tokens`), bytes for a 413, levels for a too-deep body."""

    title: str
    status: int
    detail: str = ""
    type: str = "about:blank"
    instance: str = ""
    errors: list[ProblemItem] = []
    tokens: int | None = None
    limit: int | None = None


class UsageWire(msgspec.Struct):
    """`jev.schema.Usage` on the wire: the one decision pass apart from the passes that wrote text fields
    (`generation_passes`, with `generated_tokens` and `accepted_length`, tokens per target pass)."""

    input_tokens: int
    decision_passes: int
    generation_passes: int
    queue_ms: float
    compute_ms: float
    generated_tokens: int = 0
    accepted_length: float = 0.0


class OutcomeWire(msgspec.Struct):
    abstained: bool
    confidence: float
    threshold: float | None = None
    prediction_set: list[Any] | None = None
    coverage: float | None = None


class ModelInfo(msgspec.Struct):
    """Which model, calibration and schema produced a decision; `calibration` is its identity."""

    task: str
    name: str
    model_id: str
    calibrator_id: str | None
    calibrated: bool
    calibration: dict[str, Any] | None
    schema_hash: str
    truncated_input: bool
    truncated_texts: list[str] = []


class FieldInfo(msgspec.Struct, omit_defaults=True):
    """A decision field; text fields have no values and a token limit."""

    name: str
    kind: str
    values: list[Any]
    nullable: bool
    max_tokens: int = 0


class TaskSummary(msgspec.Struct):
    name: str
    description: str
    decision_model: str
    schema_hash: str


class TaskDetail(msgspec.Struct):
    """A task as a client needs it: JSON Schemas, the layout its hash is taken of, fields and limits."""

    name: str
    description: str
    decision_model: str
    schema_hash: str
    layout: dict[str, Any]
    input_schema: dict[str, Any]
    decision_schema: dict[str, Any]
    fields: list[FieldInfo]
    max_input_tokens: int
    truncate: bool
    policies: dict[str, dict[str, Any]]


class TaskList(msgspec.Struct):
    tasks: list[TaskSummary]


class ModelTask(msgspec.Struct):
    reference: str
    schema_hash: str
    max_input_tokens: int
    calibrated: bool
    calibrator_id: str | None
    calibration: dict[str, Any] | None


class ModelDescription(msgspec.Struct):
    name: str
    model_id: str
    tasks: dict[str, ModelTask]
    training: dict[str, Any]


class TaskCalibrationReport(msgspec.Struct):
    calibrated: bool
    calibrator_id: str | None
    calibration: dict[str, Any] | None
    metrics: dict[str, Any]


class CalibrationReport(msgspec.Struct):
    """Per task, the calibration metrics stored in the model's `jev.json`; `calibrated: false` when absent."""

    model_id: str
    calibrated: bool
    tasks: dict[str, TaskCalibrationReport]


class Health(msgspec.Struct):
    status: str


@dataclass(frozen=True)
class TaskWire:
    """One task's compiled request/response Structs and the key table its `probs` use."""

    task: Task
    input: type[msgspec.Struct]
    decision: type[msgspec.Struct]
    request: type[msgspec.Struct]
    batch_request: type[msgspec.Struct]
    response: type[msgspec.Struct]
    batch_response: type[msgspec.Struct]

    @classmethod
    def compile(cls, task: Task, max_batch_inputs: int) -> "TaskWire":
        for field in task.spec.closed_fields:
            keys_for(field.name, field.values)
        prefix = "".join(part.capitalize() for part in task.name.replace("-", "_").split("_"))
        compiler = StructCompiler(prefix, f"jev.serve.tasks.{task.name.replace('-', '_')}")
        input_struct = compiler.struct(task.input_model, f"{prefix}Input")
        decision = compiler.struct(task.decision_model, f"{prefix}Decision")
        request = msgspec.defstruct(
            f"{prefix}DecideRequest", [("input", input_struct)], forbid_unknown_fields=True, module=compiler.module
        )
        inputs = Annotated[list[input_struct], msgspec.Meta(min_length=1, max_length=max_batch_inputs)]
        batch_request = msgspec.defstruct(
            f"{prefix}BatchRequest", [("inputs", inputs)], forbid_unknown_fields=True, module=compiler.module
        )
        response = msgspec.defstruct(
            f"{prefix}Decided",
            [("value", decision), ("probs", dict[str, dict[str, float]]), ("outcomes", dict[str, OutcomeWire]),
             ("usage", UsageWire), ("model", ModelInfo)],
            module=compiler.module,
        )
        batch_response = msgspec.defstruct(
            f"{prefix}BatchDecided", [("results", list[response])], module=compiler.module
        )
        return cls(task, input_struct, decision, request, batch_request, response, batch_response)

    def answer(self, decided: Decided, queue_ms: float, ids: dict[str, Any]) -> msgspec.Struct:
        """The response Struct for one decision; `ids` holds the names the engine does not know."""
        usage = decided.usage
        return self.response(
            value=msgspec.convert(decided.value.model_dump(mode="json", by_alias=True), self.decision),
            probs={name: {probability_key(v): p for v, p in table.items()} for name, table in decided.probs.items()},
            outcomes={name: OutcomeWire(**o.model_dump()) for name, o in decided.outcomes.items()},
            usage=UsageWire(
                usage.input_tokens, usage.decision_passes, usage.generation_passes, queue_ms, usage.compute_ms,
                usage.generated_tokens, usage.accepted_length,
            ),
            model=ModelInfo(
                task=self.task.name, schema_hash=self.task.spec.hash,
                calibrated=decided.model["calibrated"], calibration=decided.model["calibration"],
                truncated_input=decided.model["truncated_input"],
                truncated_texts=decided.model.get("truncated_texts", []), **ids,
            ),
        )

    def detail(self, max_input_tokens: int) -> TaskDetail:
        spec = self.task.spec
        return TaskDetail(
            name=self.task.name,
            description=self.task.description,
            decision_model=self.task.decision_model.__name__,
            schema_hash=spec.hash,
            layout=spec.layout(),
            input_schema=self.task.input_model.model_json_schema(),
            decision_schema=self.task.decision_model.model_json_schema(),
            fields=[FieldInfo(f.name, f.kind, list(f.values), f.nullable, f.max_tokens) for f in spec.fields],
            max_input_tokens=max_input_tokens,
            truncate=self.task.truncate,
            policies={name: p.model_dump(exclude_none=True) for name, p in self.task.policies.items()},
        )

    def summary(self) -> TaskSummary:
        return TaskSummary(self.task.name, self.task.description, self.task.decision_model.__name__,
                           self.task.spec.hash)
