// Package deploy holds no code: its folder holds pubsink's deployment files,
// and its tests check them against each other and against pubsink.
//
//   - gke/: a kustomize base (Namespace, ServiceAccount with Workload
//     Identity, ConfigMap, Deployment, PodMonitoring, Rules,
//     PodDisruptionBudget, HorizontalPodAutoscaler), an example overlay and
//     a component that adds the subscription's backlog to the autoscaler;
//   - cloudrun/: a worker pool (workerpool.yaml) and, as the alternative, a
//     service with CPU always allocated (service.yaml);
//   - docker-compose.yaml: both emulators with health checks, setup, run;
//   - prometheus/: the alert rules and their promtool unit tests;
//   - grafana/: a dashboard of the same metrics.
//
// # Guarantees
//
// The tests fail when:
//
//   - an alert rule, the Rules resource, an alert unit test or a dashboard
//     query names a metric that pubsink does not export, filters a metric by
//     a label it does not have, or takes a rate of a gauge; or an alert has
//     no severity or no promtool unit test;
//   - gke/base/rules.yaml is not prometheus/alerts.yaml's groups as a Rules
//     resource (the file has one source; `go test ./deploy -run
//     TestRulesResource -update` rewrites the copy);
//   - the dashboard is not valid JSON, repeats a panel id, or lacks its
//     datasource and pipeline variables;
//   - the example overlay does not build with `kubectl kustomize` (when
//     kubectl is installed; the tests skip it otherwise), lacks one of the
//     kinds above, leaves an object outside its namespace or a placeholder
//     in, or references what it does not hold (service account, ConfigMap,
//     port, pod labels);
//   - the overlay's or the base's configuration is one that pubsink refuses,
//     or its shutdown_timeout outlasts the pods' grace period;
//   - the backlog component scales on a subscription that is not a main
//     subscription of the configuration;
//   - the Cloud Run and compose files lose what the comments in them promise
//     (the shutdown budget, the probes, the emulators' health checks).
//
// The list of exported metrics is written in the test (exportedMetrics): it
// is the contract of docs/reference.md, "Metrics".
package deploy
