CREATE STREAM events (id BIGINT, kind VARCHAR, amount DOUBLE)
  WITH ('value.format' = 'json', 'topic.partitions' = 1);

CREATE STREAM big_events AS
SELECT id, kind, amount FROM events WHERE amount > 50;
