// Package deploy holds the checks that keep the ways of running Rocket
// Rides in step with its commands: the Procfile that `make dev` runs,
// docker-compose.yml and the image it builds, and .env.example. Its tests
// fail when a process is added without a Procfile line or a compose
// service, when a service leaves out a setting its command requires, or
// when a setting is read but not documented. It has no code of its own.
package deploy
