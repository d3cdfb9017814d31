-- Continuous queries: each runs as a Spark Structured Streaming query.
CREATE STREAM curated.pageviews_filtered WITH ('topic.partitions' = 1) AS
SELECT id, viewtime, userid, pageid
FROM pageviews
WHERE pageid <> 'Page_2';

CREATE STREAM curated.pageviews_enriched AS
SELECT
  id,
  CAST(viewtime / 1000 AS BIGINT) AS view_second,
  UPPER(userid) AS user_upper,
  CONCAT('https://example.com/', pageid) AS url,
  CASE WHEN pageid LIKE 'Page_1%' THEN 'top' ELSE 'other' END AS section
FROM analytics.public.pageviews
WHERE userid IS NOT NULL;
