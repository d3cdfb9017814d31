-- Orders in Avro (columns declared here, the schema registered on apply).
CREATE STREAM orders (order_id BIGINT, customer VARCHAR, amount DECIMAL(10, 2), placed_at TIMESTAMP)
  WITH ('value.format' = 'avro', 'key.format' = 'avro', 'topic.partitions' = 2);

-- Large orders re-encoded as Protobuf.
CREATE STREAM large_orders WITH ('value.format' = 'protobuf') AS
SELECT order_id, customer, amount, placed_at FROM orders WHERE amount > 100;

-- Payments: no column list, so the columns come from the registry subject payments-value (its latest schema),
-- read while loading (validate, plan, apply).
CREATE STREAM payments WITH ('value.format' = 'avro');
