"""pydantic models compiled to msgspec Structs: same JSON shape, constraints kept, defaults left to pydantic."""

import datetime
from typing import Literal

import msgspec
import pytest
from pydantic import BaseModel, ConfigDict, Field

from jev.schema.keys import keys_for, probability_key
from jev.serve.structs import StructCompiler


class Address(BaseModel):
    city: str


class Order(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sku: str = Field(min_length=3, description="the product code")
    quantity: int = Field(ge=1, le=10)
    when: datetime.date | None = None
    tags: set[Literal["gift", "rush"]] = set()
    ship_to: Address
    note: str = Field(default="", alias="Note")
    anything: object = None


def compile_order() -> type[msgspec.Struct]:
    return StructCompiler("Shop", "tests.shop").struct(Order)


def test_valid_json_decodes_and_round_trips_to_what_pydantic_accepts():
    struct = compile_order()
    data = msgspec.json.decode(b'{"sku": "abc", "quantity": 2, "ship_to": {"city": "Oslo"}, "Note": "hi"}',
                               type=struct)
    plain = msgspec.to_builtins(data)
    assert plain == {"sku": "abc", "quantity": 2, "ship_to": {"city": "Oslo"}, "Note": "hi"}
    assert Order.model_validate(plain).note == "hi" and Order.model_validate(plain).tags == set()


@pytest.mark.parametrize("body, where", [
    (b'{"sku": "ab", "quantity": 2, "ship_to": {"city": "x"}}', "$.sku"),
    (b'{"sku": "abc", "quantity": 11, "ship_to": {"city": "x"}}', "$.quantity"),
    (b'{"sku": "abc", "quantity": 1, "ship_to": {}}', "$.ship_to"),
    (b'{"sku": "abc", "quantity": 1, "ship_to": {"city": "x"}, "tags": ["nope"]}', "$.tags[0]"),
    (b'{"sku": "abc", "quantity": 1, "ship_to": {"city": "x"}, "extra": 1}', "extra"),
])
def test_constraints_and_forbidden_extras_are_checked(body, where):
    with pytest.raises(msgspec.ValidationError, match=where.replace("$", r"\$").replace("[", r"\[")):
        msgspec.json.decode(body, type=compile_order())


def test_schema_names_and_descriptions_reach_openapi():
    struct = compile_order()
    _, components = msgspec.json.schema_components([struct])
    order = components["ShopOrder"]
    assert order["properties"]["sku"]["description"] == "the product code"
    assert set(order["required"]) == {"sku", "quantity", "ship_to"}
    assert "ShopAddress" in components


def test_probability_keys_are_unambiguous():
    assert [probability_key(v) for v in ("a", True, 3, None)] == ["a", "true", "3", "null"]
    assert keys_for("f", [1, 2, None]) == {"1": 1, "2": 2, "null": None}
    with pytest.raises(ValueError, match="share the JSON key"):
        keys_for("f", ["1", 1])
