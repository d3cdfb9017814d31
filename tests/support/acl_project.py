"""The project of the Kafka ACL tests: two streams, two roles mapped to principals, one grant each."""

CONFIG = """\
name: {name}
default:
  database: analytics
  schema: public
  store: kafka_main
default_environment: dev
environments:
  dev:
    topic_prefix: "{name}_"
"""
STORE = """\
stores:
  - name: kafka_main
    type: kafka
    bootstrap_servers: "{bootstrap}"
    properties:
      acl.principals.analyst: "User:alice"
      acl.principals.writer: "User:bob"
      acl.group_prefix: "{name}-"
"""
ROLES = """\
roles:
  - name: analyst
  - name: writer
"""
SQL = """\
CREATE STREAM reads (id BIGINT, name VARCHAR) WITH ('value.format' = 'json', 'topic.partitions' = 1);
CREATE STREAM writes (id BIGINT, name VARCHAR) WITH ('value.format' = 'json', 'topic.partitions' = 1);
GRANT SELECT ON STREAM reads TO ROLE analyst;
GRANT INSERT ON STREAM writes TO ROLE writer;
"""
