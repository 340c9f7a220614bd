-- Revenue per channel so far in each 20-second window, every 5 seconds (CUMULATE).
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

CREATE VIEW bid AS
SELECT bid.auction, bid.bidder, bid.price, bid.channel, bid.url, `dateTime`, bid.extra
FROM datagen WHERE event_type = 2;

SELECT channel, window_start, window_end, SUM(price) AS revenue, MAX(price) AS top_price,
       COUNT(DISTINCT bidder) AS bidders, AVG(price) AS avg_price
FROM TABLE(CUMULATE(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '5' SECOND, INTERVAL '20' SECOND))
WHERE price > 1000
GROUP BY channel, window_start, window_end;
