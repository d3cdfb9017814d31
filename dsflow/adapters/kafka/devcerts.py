"""TLS material for the development broker: a CA made for one run, the broker's certificate for 127.0.0.1 and
localhost, and a client certificate for mutual TLS, all PEM (what Kafka's PEM key stores and librdkafka read).

Files written into the folder: ca.pem (the CA's certificate: clients' `ssl.ca.location`), ca.key, broker.pem (the
broker's PKCS#8 key and its certificate chain), client.pem and client.key (`ssl.certificate.location`,
`ssl.key.location`). The keys are unencrypted and the folder is mode 0700: a development broker's, never a
production one's.
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path


def write(folder: Path, client_cn: str) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    later = now + datetime.timedelta(days=365)

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    def pem_key(key) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    def pem_cert(cert) -> bytes:
        return cert.public_bytes(serialization.Encoding.PEM)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(name("dsflow dev CA")).issuer_name(name("dsflow dev CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now).not_valid_after(later)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))

    def leaf(common: str, usage, alt_names: list | None = None):
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (x509.CertificateBuilder().subject_name(name(common)).issuer_name(ca.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now).not_valid_after(later)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if alt_names:
            builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        return key, builder.sign(ca_key, hashes.SHA256())

    broker_key, broker = leaf("localhost", ExtendedKeyUsageOID.SERVER_AUTH,
                              [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    client_key, client = leaf(client_cn, ExtendedKeyUsageOID.CLIENT_AUTH)
    files = {"ca.pem": pem_cert(ca), "ca.key": pem_key(ca_key), "broker.pem": pem_key(broker_key) + pem_cert(broker),
             "client.pem": pem_cert(client), "client.key": pem_key(client_key)}
    for file_name, data in files.items():
        path = folder / file_name
        path.write_bytes(data)
        path.chmod(0o600)
