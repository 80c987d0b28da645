"""Triton's generate extension on an LLM endpoint: POST /v2/models/{endpoint}/generate and
/generate_stream (what genai-perf's `--endpoint-type generate` and Triton's own clients send),
read as the completion it stands for (requests.py's rules hold).

`text_input` (a string, or an array of exactly one) is the completion's prompt; the sampling
fields of a completion may come at the top level or in a `parameters` object (Triton's), not
both for one name; `stream` (a boolean) true asks for a stream on either route — genai-perf's
`--endpoint-type generate --streaming` posts `"stream": true` to /generate and reads events —
and generate_stream always streams; the model is the endpoint the path names. A refusal names `text_input` where a completion's would
name `prompt`. The reply is Triton's (`text_output`; handler.py).
"""

from __future__ import annotations

from gateway.llm.errors import LlmError
from gateway.llm.requests import COMMON, LlmRequest, bad, checked, json_object

GENERATE_FIELDS = (COMMON - {"model", "n", "stream_options"}) | {"text_input", "parameters"}


def parse_generate(raw: bytes, model: str, *, stream: bool) -> LlmRequest:
    """A generate or generate_stream body on an LLM endpoint, checked as the completion it is."""
    body = json_object(raw)
    unknown = [k for k in body if k not in GENERATE_FIELDS]
    if unknown:
        name = unknown[0][:64]
        raise bad(f"unrecognized or unsupported request argument: {name}", name, "unknown_parameter")
    parameters = body.pop("parameters", None)
    if parameters is not None:
        if type(parameters) is not dict:
            raise bad("parameters must be a JSON object", "parameters")
        for name, value in parameters.items():
            if name not in GENERATE_FIELDS or name in ("text_input", "parameters"):
                raise bad(
                    f"unrecognized or unsupported parameter: {name[:64]}",
                    f"parameters.{name[:64]}",
                    "unknown_parameter",
                )
            if name in body:
                raise bad(f"{name} is given twice (at the top level and in parameters)", name)
            body[name] = value
    wanted = body.pop("stream", None)
    if wanted is not None and type(wanted) is not bool:
        raise bad("stream must be a boolean", "stream")
    stream = stream or bool(wanted)
    body["prompt"] = body.pop("text_input", None)
    body["model"], body["stream"] = model, stream
    try:
        req = checked(body, chat=False)
    except LlmError as exc:
        if exc.param == "prompt":
            exc.param, exc.message = "text_input", exc.message.replace("prompt", "text_input")
        raise
    req.generate = True
    return req
