-- Adapted for dsflow from ../published/q7.sql (nexmark/nexmark, Apache-2.0): only the DDL
-- differs: the sink is a Kafka stream instead of Flink's blackhole table, its columns declared in the SELECT's order
-- (price before bidder: Flink maps the INSERT's columns by position, dsflow by name).
-- The query is as published; ../README.md lists its status.
-- -------------------------------------------------------------------------------------------------
-- Query 7: Highest Bid
-- -------------------------------------------------------------------------------------------------
-- What are the highest bids per period?
-- Deliberately implemented using a side input to illustrate fanout.
--
-- The original Nexmark Query7 calculate the highest bids in the last minute.
-- We will use a shorter window (10 seconds) to help make testing easier.
-- -------------------------------------------------------------------------------------------------

CREATE STREAM nexmark_q7 (
  auction  BIGINT,
  price  BIGINT,
  bidder  BIGINT,
  `dateTime`  TIMESTAMP(3),
  extra  VARCHAR
) WITH ('value.format' = 'json');

INSERT INTO nexmark_q7
SELECT B.auction, B.price, B.bidder, B.`dateTime`, B.extra
from bid B
JOIN (
  SELECT MAX(price) AS maxprice, window_end as `dateTime`
  FROM TABLE(
          TUMBLE(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
  GROUP BY window_start, window_end
) B1
ON B.price = B1.maxprice
WHERE B.`dateTime` BETWEEN B1.`dateTime`  - INTERVAL '10' SECOND AND B1.`dateTime`;