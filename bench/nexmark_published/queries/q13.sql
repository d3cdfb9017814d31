-- Adapted for dsflow from ../published/q13.sql (nexmark/nexmark, Apache-2.0): only the DDL differs: side_input is a
-- changelog on Kafka keyed by `key` (read whole at every micro-batch) instead of a CSV file table; the sink a stream.
-- The query is as published; ../README.md lists its status.
-- -------------------------------------------------------------------------------------------------
-- Query 13: Bounded Side Input Join (Not in original suite)
-- -------------------------------------------------------------------------------------------------
-- Joins a stream to a bounded side input, modeling basic stream enrichment.
-- -------------------------------------------------------------------------------------------------

-- TODO: use the new "filesystem" connector once FLINK-17397 is done
CREATE CHANGELOG side_input (
  key BIGINT,
  `value` VARCHAR,
  PRIMARY KEY (key)
) WITH ('value.format' = 'json');

CREATE STREAM nexmark_q13 (
  auction  BIGINT,
  bidder  BIGINT,
  price  BIGINT,
  `dateTime`  TIMESTAMP(3),
  `value`  VARCHAR
) WITH ('value.format' = 'json');

INSERT INTO nexmark_q13
SELECT
    B.auction,
    B.bidder,
    B.price,
    B.`dateTime`,
    S.`value`
FROM (SELECT *, PROCTIME() as p_time FROM bid) B
JOIN side_input FOR SYSTEM_TIME AS OF B.p_time AS S
ON mod(B.auction, 10000) = S.key;