DROP TABLE abandoned_requests;
