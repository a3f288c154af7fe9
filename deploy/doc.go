// Package deploy holds what operators load beside the gateway: the
// Prometheus recording and alerting rules (prometheus/) and the Grafana
// dashboard (grafana/). It has no code; its test proves the rules and
// every panel's query against a real Prometheus scraping a gateway.
package deploy
