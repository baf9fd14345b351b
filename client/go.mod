module github.com/rocketrides/rocketrides/client

go 1.22
