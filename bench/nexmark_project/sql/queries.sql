-- The Nexmark queries (as in the Flink/Beam Nexmark suites) in dsflow SQL. q0-q2 are exactly
-- Nexmark's; q3, q5, q7 and q8 are the closest forms dsflow supports today, and
-- docs/benchmarks.md ("How the queries differ from Nexmark") says exactly how each differs.

-- q0: pass-through, measures the cost of reading and writing.
CREATE STREAM q0 WITH ('topic' = 'nexmark_q0') AS
SELECT auction, bidder, price, channel, url, date_time, extra FROM bid;

-- q1: currency conversion, dollars to euros.
CREATE STREAM q1 WITH ('topic' = 'nexmark_q1') AS
SELECT auction, bidder, CAST(0.908 * price AS DOUBLE) AS price, channel, url, date_time, extra FROM bid;

-- q2: selection, bids on every 123rd auction.
CREATE STREAM q2 WITH ('topic' = 'nexmark_q2') AS
SELECT auction, price FROM bid WHERE auction % 123 = 0;

-- q3: local item suggestion: auctions of category 10 by sellers in OR, ID or CA. Nexmark joins
-- against every person ever seen; here an interval join of the two streams (a seller joined at
-- most 10 s of event time around the auction; the generator's sellers are at most 5 s old).
CREATE STREAM q3 WITH ('topic' = 'nexmark_q3') AS
SELECT p.name, p.city, p.state, a.id
FROM auction a JOIN person p WITHIN 10 SECONDS ON a.seller = p.id
WHERE a.category = 10 AND (p.state = 'OR' OR p.state = 'ID' OR p.state = 'CA');

-- q5: hot items: bids per auction in 10 s windows sliding by 2 s. Nexmark then keeps the
-- auction(s) with the most bids per window; that second aggregation is not supported yet.
CREATE CHANGELOG q5 WITH ('topic' = 'nexmark_q5') AS
SELECT window_start, window_end, auction, COUNT(*) AS num
FROM HOP(bid, SIZE 10 SECONDS, ADVANCE BY 2 SECONDS)
GROUP BY window_start, window_end, auction;

-- q7: highest bid: the highest price per 10 s tumbling window. Nexmark then joins back to the
-- bids to output the winning bid(s) (auction, bidder); a join with a changelog is not supported yet.
CREATE CHANGELOG q7 WITH ('topic' = 'nexmark_q7') AS
SELECT window_start, window_end, MAX(price) AS maxprice, COUNT(*) AS bids
FROM TUMBLE(bid, SIZE 10 SECONDS)
GROUP BY window_start, window_end;

-- q8: monitor new users: persons who opened an auction in the same 10 s tumbling window as
-- they joined. Nexmark joins two windowed aggregations (one row per person and window); here an
-- interval join restricted to the same window (one row per person and auction).
CREATE STREAM q8 WITH ('topic' = 'nexmark_q8') AS
SELECT p.id, p.name, p.date_time AS person_time, a.id AS auction, a.date_time AS auction_time
FROM person p JOIN auction a WITHIN 10 SECONDS
  ON p.id = a.seller AND FLOOR(p.date_time / 10000) = FLOOR(a.date_time / 10000);
