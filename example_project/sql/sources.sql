-- Raw events, fed by the datagen entries in stores/kafka.yml.
CREATE STREAM pageviews (
  id BIGINT,
  viewtime BIGINT,
  userid VARCHAR,
  pageid VARCHAR
) WITH (
  'store' = 'kafka_main',
  'topic' = 'pageviews',
  'value.format' = 'json',
  'timestamp' = 'viewtime',
  'topic.partitions' = 2,
  'topic.replicas' = 1
);

CREATE CHANGELOG users (
  userid VARCHAR,
  registertime BIGINT,
  regionid VARCHAR,
  gender VARCHAR,
  PRIMARY KEY (userid)
) WITH (
  'topic' = 'users',
  'value.format' = 'json',
  'topic.partitions' = 1
);
