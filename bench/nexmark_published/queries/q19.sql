-- Adapted for dsflow from ../published/q19.sql (nexmark/nexmark, Apache-2.0): only the DDL
-- differs: the sink is a changelog keyed by the PARTITION BY column and the rank (auction, rank_number).
-- The query is as published; ../README.md lists its status.
-- -------------------------------------------------------------------------------------------------
-- Query 19: Auction TOP-10 Price (Not in original suite)
-- -------------------------------------------------------------------------------------------------
-- What's the top price 10 bids of an auction?
-- Illustrates a TOP-N query.
-- -------------------------------------------------------------------------------------------------

CREATE CHANGELOG nexmark_q19 (
    auction  BIGINT,
    bidder  BIGINT,
    price  BIGINT,
    channel  VARCHAR,
    url  VARCHAR,
    `dateTime`  TIMESTAMP(3),
    extra  VARCHAR,
    rank_number  BIGINT,
    PRIMARY KEY (auction, rank_number)
) WITH ('value.format' = 'json');

INSERT INTO nexmark_q19
SELECT * FROM
(SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rank_number FROM bid)
WHERE rank_number <= 10;