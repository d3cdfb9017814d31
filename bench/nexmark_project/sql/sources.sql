-- Nexmark's three event streams (dsflow.nexmark generates them; bench/run.py preloads them).
CREATE STREAM person (
  id BIGINT, name VARCHAR, email_address VARCHAR, credit_card VARCHAR, city VARCHAR, state VARCHAR,
  date_time BIGINT, extra VARCHAR
) WITH ('topic' = 'nexmark_person', 'value.format' = 'json', 'timestamp' = 'date_time',
        'topic.partitions' = {{ var('partitions') }});

CREATE STREAM auction (
  id BIGINT, item_name VARCHAR, description VARCHAR, initial_bid BIGINT, reserve BIGINT,
  date_time BIGINT, expires BIGINT, seller BIGINT, category BIGINT, extra VARCHAR
) WITH ('topic' = 'nexmark_auction', 'value.format' = 'json', 'timestamp' = 'date_time',
        'topic.partitions' = {{ var('partitions') }});

CREATE STREAM bid (
  auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR, date_time BIGINT, extra VARCHAR
) WITH ('topic' = 'nexmark_bid', 'value.format' = 'json', 'timestamp' = 'date_time',
        'topic.partitions' = {{ var('partitions') }});
