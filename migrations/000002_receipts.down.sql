DROP TABLE ride_receipts;
