"""Apache Kafka for development and tests: one KRaft node (broker and controller) on 127.0.0.1.

`dsflow dev up --broker kafka` starts it; the test session starts one per run. What it needs and where it goes:

- **Jars**: `org.apache.kafka:kafka_2.13:KAFKA_VERSION` with its runtime dependencies and log4j's SLF4J binding
  (about 45 MB), resolved once by Maven (`mvn dependency:copy-dependencies`, with the machine's own Maven settings
  and repositories) into `$DSFLOW_CACHE_DIR/kafka-VERSION/libs` (default `~/.cache/dsflow`). A folder of the same
  jars copied by hand (an offline machine) is used instead when `DSFLOW_KAFKA_LIBS` names it.
- **Process**: `java -cp libs/* kafka.Kafka server.properties`, heap 256 MB to 1 GB (about 350-600 MB RSS), its
  data, TLS material and log in the run folder; stopped by its PID.
- **Listeners**: PLAINTEXT on the given port; SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), SSL (the
  server's certificate signed by a CA made for this run) and MTLS (SSL that requires a client certificate signed by
  that CA) on free ports. ACLs are enforced by KRaft's StandardAuthorizer: the plaintext and SSL listeners'
  `User:ANONYMOUS`, the mTLS client `User:dsflow-client` (its certificate's CN) and SASL's `admin` are super
  users; the other SASL users (USERS) may do only what an ACL allows them.
- **Retention**: none by time (`log.retention.ms=-1`; a topic's own `retention.ms` still applies). Kafka's default,
  7 days measured from the records' own timestamps, deletes at its next check (every 5 minutes) records whose event
  times are fixed in the past, as test and sample data's often are: a reader at offset 0 then finds its range gone.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from dsflow.errors import DsflowError

KAFKA_VERSION = "4.1.1"
LOG4J_VERSION = "2.24.3"
USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
"""SASL users (PLAIN and both SCRAM mechanisms) and their passwords: a development broker's, not secrets."""
SUPER_USERS = ("User:ANONYMOUS", "User:admin", "User:dsflow-client")
CLIENT_CN = "dsflow-client"

POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dsflow.dev</groupId><artifactId>kafka-broker</artifactId><version>1</version><packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
      <version>{kafka}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId>
      <version>{log4j}</version></dependency>
  </dependencies>
</project>
"""

LOG4J = """status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = out
logger.started.name = kafka.server.BrokerServer
logger.started.level = INFO
"""


@dataclass(frozen=True)
class Listeners:
    """The ports of one broker's listeners on 127.0.0.1."""

    plaintext: int
    sasl: int
    ssl: int
    mtls: int
    controller: int


def cache_dir() -> Path:
    return Path(os.environ.get("DSFLOW_CACHE_DIR") or Path.home() / ".cache" / "dsflow")


def ensure_jars() -> Path:
    """The folder of Kafka's jars: DSFLOW_KAFKA_LIBS, or the cache, resolved by Maven on first use."""
    given = os.environ.get("DSFLOW_KAFKA_LIBS")
    if given:
        libs = Path(given)
        if not any(libs.glob("kafka_2.13-*.jar")):
            raise DsflowError("DSF-E904", f"DSFLOW_KAFKA_LIBS={given} holds no kafka_2.13 jar",
                              hint="copy the jars of org.apache.kafka:kafka_2.13 and its dependencies there")
        return libs
    home = cache_dir() / f"kafka-{KAFKA_VERSION}"
    libs = home / "libs"
    if (home / "complete").exists():
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise DsflowError("DSF-E904", "Apache Kafka's jars are not cached and Maven (mvn) is not installed",
                          hint="install Maven (Debian: apt-get install maven), or set DSFLOW_KAFKA_LIBS to a "
                               "folder of the jars")
    home.mkdir(parents=True, exist_ok=True)
    (home / "pom.xml").write_text(POM.format(kafka=KAFKA_VERSION, log4j=LOG4J_VERSION))
    shutil.rmtree(libs, ignore_errors=True)
    done = subprocess.run([mvn, "-q", "-B", "-f", str(home / "pom.xml"), "dependency:copy-dependencies",
                           f"-DoutputDirectory={libs}", "-DincludeScope=runtime"],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise DsflowError("DSF-E904", f"Maven could not resolve Apache Kafka {KAFKA_VERSION}'s jars",
                          hint=(done.stdout + done.stderr).strip()[-800:])
    (home / "complete").write_text(KAFKA_VERSION)
    return libs


def java() -> str:
    found = shutil.which("java")
    if found is None:
        raise DsflowError("DSF-E904", "Apache Kafka needs Java 17 or later, and 'java' is not on the PATH",
                          hint="install a JDK (Debian: apt-get install openjdk-17-jre-headless)")
    return found


def server_properties(run_dir: Path, ports: Listeners) -> str:
    tls = run_dir / "tls"
    plain_users = " ".join(f'user_{name}="{password}"' for name, password in USERS.items())
    lines = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{ports.controller}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listeners": (f"PLAINTEXT://127.0.0.1:{ports.plaintext},SASL_PLAINTEXT://127.0.0.1:{ports.sasl},"
                      f"SSL://127.0.0.1:{ports.ssl},MTLS://127.0.0.1:{ports.mtls},"
                      f"CONTROLLER://127.0.0.1:{ports.controller}"),
        "advertised.listeners": (f"PLAINTEXT://127.0.0.1:{ports.plaintext},SASL_PLAINTEXT://127.0.0.1:{ports.sasl},"
                                 f"SSL://127.0.0.1:{ports.ssl},MTLS://127.0.0.1:{ports.mtls}"),
        "listener.security.protocol.map": ("PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL,MTLS:SSL,"
                                           "CONTROLLER:PLAINTEXT"),
        "log.dirs": str(run_dir / "data"),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
        "log.retention.ms": "-1",
        "log.flush.interval.messages": "9223372036854775807",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": ";".join(SUPER_USERS),
        "allow.everyone.if.no.acl.found": "false",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="admin" password="{USERS["admin"]}" {plain_users};',
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(tls / "broker.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls / "ca.pem"),
        "ssl.endpoint.identification.algorithm": "",
        "listener.name.mtls.ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]*).*$/$1/,DEFAULT",
    }
    return "".join(f"{key}={value}\n" for key, value in lines.items())


def new_cluster_id() -> str:
    """A random cluster id in Kafka's form (a UUID, URL-safe base64). Never one that starts with '-', as Kafka's own
    Uuid.randomUuid ensures: the storage tool's argument parser would take it for an option (1 draw in 64)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def format_storage(libs: Path, run_dir: Path) -> None:
    cluster_id = new_cluster_id()
    scram = [arg for name, password in USERS.items() for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512")
             for arg in ("--add-scram", f"{mechanism}=[name={name},password={password}]")]
    done = subprocess.run([java(), *_jvm_base(libs, run_dir), "kafka.tools.StorageTool", "format", "-t", cluster_id,
                           "-c", str(run_dir / "server.properties"), *scram],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise DsflowError("DSF-E903", "Kafka's storage could not be formatted",
                          hint=(done.stdout + done.stderr).strip()[-800:])


def command(libs: Path, run_dir: Path, heap: str = "1g") -> list[str]:
    return [java(), "-Xms256m", f"-Xmx{heap}", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true", *_jvm_base(libs, run_dir), "kafka.Kafka", str(run_dir / "server.properties")]


def _jvm_base(libs: Path, run_dir: Path) -> list[str]:
    return ["-cp", f"{libs}/*", f"-Dlog4j2.configurationFile={run_dir / 'log4j2.properties'}"]


def prepare(run_dir: Path, ports: Listeners) -> Path:
    """Write the broker's configuration, TLS material and formatted storage into run_dir; the jars' folder."""
    from dsflow.adapters.kafka import devcerts

    libs = ensure_jars()
    devcerts.write(run_dir / "tls", CLIENT_CN)
    (run_dir / "log4j2.properties").write_text(LOG4J)
    (run_dir / "server.properties").write_text(server_properties(run_dir, ports))
    format_storage(libs, run_dir)
    return libs
