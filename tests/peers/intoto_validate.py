"""Run inside the in-toto-attestation peer venv (scripts/peers.sh in-toto-attestation): validate DSSE envelopes'
in-toto Statements with the framework's own Python bindings. Usage: intoto_validate.py FILE... ; prints one
JSON line per file: {"file", "predicateType", "result"} and exits non-zero on the first invalid one.

The VSA v1 binding of in-toto-attestation 0.9.3 declares `verifiedLevels` a single string, where the SLSA spec
says an array of strings (in-toto/attestation#425, fix in #429); the spec is authoritative, so that one field is
checked against the spec here and every other field with the binding.
"""

import base64
import json
import sys
from pathlib import Path

from google.protobuf import json_format
from in_toto_attestation.predicates.test_result.v0 import test_result_pb2
from in_toto_attestation.predicates.vsa.v1 import vsa_pb2
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.statement import Statement

PREDICATES = {"https://slsa.dev/verification_summary/v1": vsa_pb2.VerificationSummary,
              "https://in-toto.io/attestation/test-result/v0.1": test_result_pb2.TestResult}

for name in sys.argv[1:]:
    envelope = json.loads(Path(name).read_text())
    assert envelope["payloadType"] == "application/vnd.in-toto+json", name
    statement = json.loads(base64.b64decode(envelope["payload"]))
    Statement.copy_from_pb(json_format.ParseDict(statement, statement_pb2.Statement())).validate()
    kind = statement["predicateType"]
    predicate = dict(statement["predicate"])
    if kind.startswith("https://slsa.dev/verification_summary/"):
        levels = predicate.pop("verifiedLevels")
        assert isinstance(levels, list) and all(isinstance(v, str) for v in levels), levels
    message = json_format.ParseDict(predicate, PREDICATES[kind]())
    result = message.verification_result if kind.startswith("https://slsa.dev/") else message.result
    print(json.dumps({"file": name, "predicateType": kind, "result": result}))
