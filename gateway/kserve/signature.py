"""What a variant's model accepts (the route table's `signature`), and the check of a request
that passed the model-independent ones (tensors.parse_request, grpc/convert.parse_infer)
against it: names (unknown, missing, duplicated), datatypes, rank, fixed dimensions, batch
size against `max_batch_size`, one batch size for all inputs, known output names. Every
problem is a `Problem` naming the input and what is wrong, in the words of tensors.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.kserve.tensors import Parsed, bad_request, quoted


@dataclass(frozen=True)
class InputSpec:
    name: str
    datatype: str
    shape: tuple  # full request shape; -1 = any size (the batch dimension first when batched)
    optional: bool = False


class Signature:
    """What a variant's model accepts (route table `signature`)."""

    __slots__ = ("inputs", "required", "outputs", "max_batch_size", "names", "fixed")

    def __init__(self, inputs: list[InputSpec], outputs: list[str] | None, max_batch_size: int):
        self.inputs = {spec.name: spec for spec in inputs}
        start = 1 if max_batch_size > 0 else 0
        # per input: (datatype, rank, ((axis, size) of each fixed dimension past the batch))
        self.fixed = {
            spec.name: (
                spec.datatype,
                len(spec.shape),
                tuple((axis, size) for axis, size in enumerate(spec.shape) if axis >= start and size != -1),
            )
            for spec in inputs
        }
        self.required = [spec.name for spec in inputs if not spec.optional]
        self.outputs = frozenset(outputs) if outputs else None
        self.max_batch_size = max_batch_size
        self.names = ", ".join(spec.name for spec in inputs)

    @classmethod
    def from_document(cls, document: dict) -> Signature:
        inputs = [
            InputSpec(i["name"], i["datatype"], tuple(i["shape"]), bool(i.get("optional", False)))
            for i in document["inputs"]
        ]
        outputs = [o["name"] for o in document.get("outputs", ())] or None
        return cls(inputs, outputs, int(document.get("max_batch_size", 0)))

    def check(self, parsed: Parsed):
        """None when the request fits this signature, else the Problem."""
        fixed = self.fixed
        batch = None
        max_batch = self.max_batch_size
        for name, datatype, shape in parsed.inputs:
            expected = fixed.get(name)
            if expected is None:
                return bad_request(f"unknown input {quoted(name)}: the model's inputs are {self.names}")
            want_type, rank, dims = expected
            if datatype != want_type:
                return bad_request(f"input {quoted(name)}: datatype {datatype} but the model takes {want_type}")
            if len(shape) != rank:
                return bad_request(
                    f"input {quoted(name)}: shape {shape} has rank {len(shape)} but the model takes "
                    f"{list(self.inputs[name].shape)}"
                )
            if max_batch > 0:
                n = shape[0]
                if n < 1 or n > max_batch:
                    return bad_request(
                        f"input {quoted(name)}: batch size {n} is outside 1..{max_batch} (the model's max_batch_size)"
                    )
                if batch is None:
                    batch = n
                elif n != batch:
                    return bad_request(f"input {quoted(name)}: batch size {n} differs from the other inputs' {batch}")
            for axis, size in dims:
                if shape[axis] != size:
                    return bad_request(
                        f"input {quoted(name)}: shape {shape} does not match the model's "
                        f"{list(self.inputs[name].shape)} (dimension {axis})"
                    )
        return self._names_problem(parsed)

    def _names_problem(self, parsed: Parsed):
        """A required input missing or an unknown output asked for, once every given input is
        known and unique: all are there when the counts match."""
        if len(parsed.inputs) != len(self.fixed):
            given = {i[0] for i in parsed.inputs}
            missing = [name for name in self.required if name not in given]
            if missing:
                return bad_request(
                    f"missing input{'s' if len(missing) > 1 else ''} {', '.join(missing)}: the model needs {self.names}"
                )
        if parsed.outputs and self.outputs is not None:
            for name in parsed.outputs:
                if name not in self.outputs:
                    return bad_request(
                        f"unknown output {quoted(name)}: the model's outputs are {', '.join(sorted(self.outputs))}"
                    )
        return None
