"""``--schema`` as native structured output: the JSON schema subset the API enforces.

Models with native structured output take ``output_config.format = {"type": "json_schema",
"schema": ...}`` and constrain the answer to it; the API accepts a subset of JSON Schema, so
the schema is rewritten the way llm-anthropic (through the anthropic SDK) rewrites it: every
object closed (``additionalProperties: false``), string formats and ``minItems`` kept only where
supported, and every other keyword moved into the description as a hint the model may follow.
Other models get the forced tool (docs/architecture.md "Model ids").
"""

STRING_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "uri", "ipv4", "ipv6", "uuid"}
)
TYPES = frozenset({"object", "array", "string", "integer", "number", "boolean", "null"})


def output_format(schema):
    return {"type": "json_schema", "schema": strict(schema)}


def strict(schema):
    """A copy of ``schema`` in the enforced subset; the caller's dict is not changed."""
    rest = dict(schema)
    out = {}
    definitions = rest.pop("$defs", None)
    if isinstance(definitions, dict):
        out["$defs"] = {name: strict(each) for name, each in definitions.items()}
    ref = rest.pop("$ref", None)
    if ref is not None:
        out["$ref"] = ref
        return out

    kind = rest.pop("type", None)
    variants = {name: rest.pop(name, None) for name in ("anyOf", "oneOf", "allOf")}
    enum = rest.get("enum")
    if isinstance(enum, list) and enum and all(_primitive(value) for value in enum):
        out["enum"] = list(rest.pop("enum"))
    if "const" in rest and _primitive(rest["const"]):
        out["const"] = rest.pop("const")
    literal = "enum" in out or "const" in out
    if literal:
        kind = None

    if isinstance(variants["anyOf"], list):
        out["anyOf"] = [strict(each) for each in variants["anyOf"]]
    elif isinstance(variants["oneOf"], list):
        out["anyOf"] = [strict(each) for each in variants["oneOf"]]  # the API has no oneOf
    elif isinstance(variants["allOf"], list):
        out["allOf"] = [strict(each) for each in variants["allOf"]]
    elif not literal:
        if kind not in TYPES:
            raise ValueError("each schema needs a type, anyOf, oneOf, allOf, const or enum")
        out["type"] = kind

    for name in ("description", "title"):
        if name in rest:
            out[name] = rest.pop(name)

    if kind == "object":
        out["properties"] = {name: strict(each) for name, each in (rest.pop("properties", None) or {}).items()}
        rest.pop("additionalProperties", None)
        out["additionalProperties"] = False
        if "required" in rest:
            out["required"] = list(rest.pop("required"))
    elif kind == "string" and rest.get("format") in STRING_FORMATS:
        out["format"] = rest.pop("format")
    elif kind == "array":
        if "items" in rest:
            out["items"] = strict(rest.pop("items"))
        if rest.get("minItems") in (0, 1):
            out["minItems"] = rest.pop("minItems")

    if rest:
        hint = "{" + ", ".join(f"{name}: {value}" for name, value in rest.items()) + "}"
        out["description"] = f"{out['description']}\n\n{hint}" if "description" in out else hint
    return out


def _primitive(value):
    return value is None or isinstance(value, (str, int, float, bool))
