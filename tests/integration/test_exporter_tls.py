"""`kvscope export --web.config.file` with the exporter-toolkit file node_exporter reads: TLS,
mTLS, a minimum TLS version and bcrypt basic auth, on a real listening exporter."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from drill.launcher import ServerProcess, kvscope_exporter
from tests.waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.no_engine]


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _cert(subject: str, key, issuer_key, issuer: x509.Name | None, *, ca: bool, server: bool) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer or name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _write(folder: Path, name: str, cert: x509.Certificate, key) -> tuple[Path, Path]:
    cert_path, key_path = folder / f"{name}.crt", folder / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("pki")
    ca_key = _key()
    ca = _cert("kvscope test CA", ca_key, ca_key, None, ca=True, server=False)
    ca_path, _ = _write(folder, "ca", ca, ca_key)
    server_key, client_key = _key(), _key()
    server = _cert("exporter", server_key, ca_key, ca.subject, ca=False, server=True)
    client = _cert("prometheus", client_key, ca_key, ca.subject, ca=False, server=False)
    server_crt, server_pem = _write(folder, "server", server, server_key)
    client_crt, client_pem = _write(folder, "client", client, client_key)
    return {
        "ca": ca_path,
        "server_crt": server_crt,
        "server_key": server_pem,
        "client_crt": client_crt,
        "client_key": client_pem,
        "folder": folder,
    }


@pytest.fixture(scope="module")
def exporter(pki) -> Iterator[ServerProcess]:
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode().replace("$2b$", "$2y$")
    web = pki["folder"] / "web.yml"
    web.write_text(
        "tls_server_config:\n"
        f"  cert_file: {pki['server_crt']}\n  key_file: {pki['server_key']}\n"
        f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki['ca']}\n"
        "  min_version: TLS13\n"
        f"basic_auth_users:\n  prometheus: '{hashed}'\n"
    )
    args = ("--gpu", "emulated", "--web.config.file", str(web), "--collect-interval", "1")
    server = kvscope_exporter(pki["folder"] / "export.log", *args, scheme="https")
    client = _client(pki)

    def ready() -> bool:
        if server.proc.poll() is not None:
            raise AssertionError(f"the exporter exited:\n{server.log_tail()}")
        try:
            return client.get(server.base_url + "/-/ready").status_code == 200
        except httpx.HTTPError:
            return False

    try:
        eventually(ready, timeout=60, what="the TLS exporter ready")
        yield server
    finally:
        client.close()
        server.stop()


def _client(pki, *, cert: bool = True, tls12: bool = False) -> httpx.Client:
    context = ssl.create_default_context(cafile=str(pki["ca"]))
    if cert:
        context.load_cert_chain(str(pki["client_crt"]), str(pki["client_key"]))
    if tls12:
        context.maximum_version = ssl.TLSVersion.TLSv1_2
    return httpx.Client(verify=context, timeout=10)


def test_mtls_and_basic_auth_let_prometheus_in(pki, exporter):
    with _client(pki) as client:
        page = client.get(exporter.base_url + "/metrics", auth=("prometheus", "s3cret"))
        assert page.status_code == 200 and b"DCGM_FI_DEV_GPU_TEMP" in page.content
        assert client.get(exporter.base_url + "/metrics", auth=("prometheus", "nope")).status_code == 401
        assert client.get(exporter.base_url + "/-/healthy").status_code == 200  # probes need no password


def test_a_client_without_a_certificate_is_refused_in_the_handshake(pki, exporter):
    with _client(pki, cert=False) as client, pytest.raises(httpx.HTTPError):
        client.get(exporter.base_url + "/-/healthy").raise_for_status()


def test_tls_below_min_version_is_refused(pki, exporter):
    with _client(pki, tls12=True) as client, pytest.raises(httpx.ConnectError):
        client.get(exporter.base_url + "/-/healthy")
