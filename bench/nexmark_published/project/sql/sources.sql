-- Nexmark's three event streams, adapted from the published ddl_gen.sql + ddl_views.sql: Flink's one
-- `datagen` table of ROW<...> columns (connector 'nexmark') and its three views become three streams, one
-- topic each, with the views' columns, names and types. `dateTime` is the event-time column
-- ('timestamp'); Flink's WATERMARK `dateTime` - INTERVAL '4' SECOND is dsflow's 'watermark.delay', a
-- query property (default 5 seconds; an INSERT INTO has no WITH clause, so it keeps the default).
CREATE STREAM person (
  id BIGINT, name VARCHAR, emailAddress VARCHAR, creditCard VARCHAR, city VARCHAR, state VARCHAR,
  `dateTime` TIMESTAMP(3), extra VARCHAR
) WITH ('topic' = 'nexmark_person', 'value.format' = 'json', 'timestamp' = 'dateTime',
        'topic.partitions' = {{ var('partitions') }});

CREATE STREAM auction (
  id BIGINT, itemName VARCHAR, description VARCHAR, initialBid BIGINT, reserve BIGINT,
  `dateTime` TIMESTAMP(3), expires TIMESTAMP(3), seller BIGINT, category BIGINT, extra VARCHAR
) WITH ('topic' = 'nexmark_auction', 'value.format' = 'json', 'timestamp' = 'dateTime',
        'topic.partitions' = {{ var('partitions') }});

CREATE STREAM bid (
  auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR, `dateTime` TIMESTAMP(3),
  extra VARCHAR
) WITH ('topic' = 'nexmark_bid', 'value.format' = 'json', 'timestamp' = 'dateTime',
        'topic.partitions' = {{ var('partitions') }});
