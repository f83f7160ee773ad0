"""`invoke study --key K --tsa URL` (issue 38 item 2): an RFC 3161 timestamp of the pre-registration from a
real timestamp authority, `openssl ts -reply` behind an HTTP server on loopback, checked with
`openssl ts -verify`; an authority that refuses costs the timestamp, never the study."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from invoking import invoke
from reprokit import resign
from studykit import scripted_backend, write_study

from openjev_repro.manifest import generate_keypair
from openjev_repro.manifest.timestamp import timestamp_query

pytestmark = pytest.mark.slow

TSA_CONFIG = """\
[ tsa ]
default_tsa = tsa_config
[ tsa_config ]
dir = {dir}
serial = $dir/serial
crypto_device = builtin
signer_cert = $dir/tsa.pem
certs = $dir/tsa.pem
signer_key = $dir/tsa.key
signer_digest = sha256
default_policy = 1.2.3.4.1
digests = sha256
accuracy = secs:1
ordering = yes
tsa_name = no
ess_cert_id_chain = no
ess_cert_id_alg = sha256
"""


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def authority(tmp_path_factory):
    """A CA, a timestamping certificate it signed, and `openssl ts -reply` served over HTTP on loopback."""
    d = tmp_path_factory.mktemp("tsa")
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca.key",
             "-out", "ca.pem", "-subj", "/CN=test root", "-days", "2", cwd=d)
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "tsa.key",
             "-out", "tsa.csr", "-subj", "/CN=test tsa", cwd=d)
    (d / "ext.cnf").write_text("extendedKeyUsage = critical, timeStamping\n")
    _openssl("x509", "-req", "-in", "tsa.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "tsa.pem", "-days", "2", "-extfile", "ext.cnf", cwd=d)
    (d / "serial").write_text("01\n")
    (d / "tsa.cnf").write_text(TSA_CONFIG.format(dir=d))

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            query = self.rfile.read(int(self.headers["Content-Length"]))
            if self.path == "/refuse":
                self.send_response(500)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            (d / "query.tsq").write_bytes(query)
            subprocess.run(["openssl", "ts", "-reply", "-config", "tsa.cnf", "-queryfile", "query.tsq",
                            "-out", "reply.tsr"], cwd=d, check=True, capture_output=True, timeout=60)
            reply = (d / "reply.tsr").read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", "application/timestamp-reply")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield d, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _signed_study(tmp: Path, tsa: str) -> subprocess.CompletedProcess[str]:
    private, _, _ = generate_keypair(tmp / "keys")
    recipe = write_study(tmp, [scripted_backend("one")], n=3)
    return invoke("study", "--recipe", str(recipe), "--out", str(tmp / "runs"), "--key", str(private), "--tsa", tsa,
                  timeout=300)


def test_the_query_is_one_openssl_reads(tmp_path):
    (tmp_path / "q.tsq").write_bytes(timestamp_query(b"data", 12345))
    text = subprocess.run(["openssl", "ts", "-query", "-in", "q.tsq", "-text"], cwd=tmp_path, check=True,
                          capture_output=True, text=True).stdout
    assert "Hash Algorithm: sha256" in text and "Nonce: 0x3039" in text and "Certificate required: yes" in text


def test_a_study_timestamps_its_preregistration(tmp_path, authority):
    directory, url = authority
    proc = _signed_study(tmp_path, url)
    assert proc.returncode == 0, proc.stderr
    run = Path(proc.stdout.strip().splitlines()[-1])
    assert "timestamped by" in proc.stderr
    verified = subprocess.run(["openssl", "ts", "-verify", "-data", str(run / "preregistration.dsse.json"),
                               "-in", str(run / "preregistration.tsr"), "-CAfile", str(directory / "ca.pem"),
                               "-untrusted", str(directory / "tsa.pem")], capture_output=True, text=True, check=False)
    assert verified.returncode == 0 and "Verification: OK" in verified.stdout, verified.stdout + verified.stderr
    assert invoke("verify", "--run", str(run), "--pubkey", str(tmp_path / "keys" / "openjev-repro.pub")).returncode == 0


def test_an_authority_that_refuses_costs_only_the_timestamp(tmp_path, authority):
    _, url = authority
    proc = _signed_study(tmp_path, url + "/refuse")
    assert proc.returncode == 0, proc.stderr
    run = Path(proc.stdout.strip().splitlines()[-1])
    assert (run / "preregistration.dsse.json").is_file() and not (run / "preregistration.tsr").exists()
    assert "no timestamp of the pre-registration" in proc.stderr


def test_tsa_without_a_key_is_refused(tmp_path):
    recipe = write_study(tmp_path, [scripted_backend("one")], n=3)
    proc = invoke("study", "--recipe", str(recipe), "--out", str(tmp_path / "runs"), "--tsa", "http://127.0.0.1:9/")
    assert proc.returncode == 1 and proc.stderr.startswith("error: --tsa") and not (tmp_path / "runs").exists()


def test_a_timestamp_of_other_bytes_fails_verify(tmp_path, authority):
    _, url = authority
    proc = _signed_study(tmp_path, url)
    run = Path(proc.stdout.strip().splitlines()[-1])
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    stamp = bytearray((copy / "preregistration.tsr").read_bytes())
    digest = hashlib.sha256((copy / "preregistration.dsse.json").read_bytes()).digest()
    at = bytes(stamp).index(digest)
    stamp[at] ^= 1  # the imprint of some other file
    (copy / "preregistration.tsr").write_bytes(bytes(stamp))
    resign(copy, tmp_path / "keys" / "openjev-repro.key")
    checked = invoke("verify", "--run", str(copy), "--pubkey", str(tmp_path / "keys" / "openjev-repro.pub"))
    assert checked.returncode == 1
    assert "FAIL  pre-registration" in checked.stdout and "does not timestamp these bytes" in checked.stdout
