"""The signed results manifest: in-toto statement, DSSE envelope, keys, environment capture."""

from .dsse import PAYLOAD_TYPE, make_envelope, pae, parse_envelope, verify_envelope
from .environment import collect_environment
from .keys import generate_keypair, keyid, load_private_key, load_public_key
from .statement import PREDICATE_TYPE, STATEMENT_TYPE, build_statement, read_statement, write_manifest

__all__ = [
    "PAYLOAD_TYPE",
    "PREDICATE_TYPE",
    "STATEMENT_TYPE",
    "build_statement",
    "collect_environment",
    "generate_keypair",
    "keyid",
    "load_private_key",
    "load_public_key",
    "make_envelope",
    "pae",
    "parse_envelope",
    "read_statement",
    "verify_envelope",
    "write_manifest",
]
