"""A private CA and a server certificate signed by it, made with ``openssl`` (Debian's
``openssl`` package), for tests and labs that serve HTTPS on their own addresses."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from reservoir.lab.errors import LabError

__all__ = ["ServerCertificate", "make_ca_and_server"]

DAYS = "2"


@dataclass(frozen=True)
class ServerCertificate:
    ca: Path  # the CA's certificate, what clients trust
    cert: Path  # the server's certificate
    key: Path  # its private key (0600)


def make_ca_and_server(
    folder: Path, ip: str = "127.0.0.1", name: str = "server"
) -> ServerCertificate:
    """A CA in ``folder`` and a certificate for ``ip`` (and ``localhost``) it signed."""
    if shutil.which("openssl") is None:
        raise LabError("openssl is not installed (Debian package openssl)")
    folder.mkdir(parents=True, exist_ok=True)
    ca_key, ca = folder / "ca.key", folder / "ca.pem"
    key, csr, cert = folder / f"{name}.key", folder / f"{name}.csr", folder / f"{name}.pem"
    ext = folder / f"{name}.ext"
    ext.write_text(f"subjectAltName = IP:{ip}, DNS:localhost\nextendedKeyUsage = serverAuth\n")
    curve = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")
    _openssl("req", "-x509", *curve, "-keyout", str(ca_key), "-out", str(ca),
             "-days", DAYS, "-subj", "/CN=Reservoir test CA")  # fmt: skip
    _openssl("req", *curve, "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={ip}")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
             "-CAcreateserial", "-out", str(cert), "-days", DAYS, "-extfile", str(ext))  # fmt: skip
    key.chmod(0o600)
    return ServerCertificate(ca=ca, cert=cert, key=key)


def _openssl(*args: str) -> None:
    done = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise LabError(f"openssl {args[0]} failed: {done.stderr.strip()[-400:]}")
