DROP TABLE reconcile_runs;
