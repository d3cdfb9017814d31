-- Nexmark q0-q2 (as in the Flink/Beam Nexmark suites). q3, q5, q7 and q8 need joins and windows:
-- they arrive with the stateful SQL work.

-- q0: pass-through, measures the cost of reading and writing.
CREATE STREAM q0 WITH ('topic' = 'nexmark_q0') AS
SELECT auction, bidder, price, channel, url, date_time, extra FROM bid;

-- q1: currency conversion, dollars to euros.
CREATE STREAM q1 WITH ('topic' = 'nexmark_q1') AS
SELECT auction, bidder, CAST(0.908 * price AS DOUBLE) AS price, channel, url, date_time, extra FROM bid;

-- q2: selection, bids on every 123rd auction.
CREATE STREAM q2 WITH ('topic' = 'nexmark_q2') AS
SELECT auction, price FROM bid WHERE auction % 123 = 0;
