-- Nexmark q8's auction side: auctions each seller opened per 10-second window.
CREATE TABLE datagen (
  event_type INT,
  person ROW<id BIGINT, name STRING, emailAddress STRING, creditCard STRING, city STRING, state STRING, `dateTime` BIGINT, extra STRING>,
  auction ROW<id BIGINT, itemName STRING, description STRING, initialBid BIGINT, reserve BIGINT, `dateTime` BIGINT, expires BIGINT, seller BIGINT, category BIGINT, extra STRING>,
  bid ROW<auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, `dateTime` BIGINT, extra STRING>,
  `dateTime` AS TO_TIMESTAMP_LTZ(CASE WHEN event_type = 0 THEN person.`dateTime` WHEN event_type = 1 THEN auction.`dateTime` ELSE bid.`dateTime` END, 3),
  WATERMARK FOR `dateTime` AS `dateTime` - INTERVAL '4' SECOND
) WITH (
  'connector' = 'kafka',
  'topic' = 'nexmark',
  'properties.bootstrap.servers' = 'localhost:9092',
  'format' = 'json'
);

CREATE VIEW auction AS
SELECT auction.id, auction.itemName, auction.description, auction.initialBid, auction.reserve,
       `dateTime`, auction.expires, auction.seller, auction.category, auction.extra
FROM datagen WHERE event_type = 1;

SELECT seller, window_start, window_end, COUNT(*) AS auctions, MIN(initialBid) AS lowest_initial_bid
FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
GROUP BY seller, window_start, window_end;
