"""Run inside the securesystemslib peer venv (scripts/peers.sh securesystemslib): check DSSE signatures with
securesystemslib's own Envelope. Usage: dsse_verify.py PUBKEY.pem FILE... ; prints the verifying keyid of each
file, exits non-zero when one does not verify."""

import json
import sys
from pathlib import Path

from cryptography.hazmat.primitives.serialization import load_pem_public_key
from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey

public = load_pem_public_key(Path(sys.argv[1]).read_bytes())
for name in sys.argv[2:]:
    data = json.loads(Path(name).read_text())
    keyid = data["signatures"][0]["keyid"]  # ours: the sha256 of the raw public key
    key = SSlibKey.from_crypto(public, keyid=keyid)
    verified = Envelope.from_dict(data).verify([key], 1)
    print(name, sorted(verified))
