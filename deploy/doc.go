// Package deploy holds no code: its folder holds pubsink's deployment files,
// and its tests check them against each other and against pubsink.
//
//   - gke/: a kustomize base (Namespace, ServiceAccount with Workload
//     Identity, ConfigMap, Deployment, PodMonitoring, Rules,
//     PodDisruptionBudget, HorizontalPodAutoscaler), an example overlay and
//     a component that adds the subscription's backlog to the autoscaler;
//   - cloudrun/: a worker pool (workerpool.yaml) and, as the alternative, a
//     service with CPU always allocated (service.yaml), both with Google's
//     Managed Service for Prometheus sidecar, which scrapes what
//     rungmp-config.yaml says; the alert rules as Cloud Monitoring alerting
//     policies (alert-policies/, one file per rule);
//   - docker-compose.yaml: both emulators with health checks, setup, run;
//     the Pub/Sub emulator built by pubsub-emulator/Dockerfile, which
//     compiles the tests' Java agent (internal/testenv/emulator/javaagent)
//     with pubsub-emulator/build-agent.sh, loaded through JAVA_OPTS;
//   - prometheus/: the alert rules and their promtool unit tests;
//   - grafana/: a dashboard of the same metrics.
//   - terraform/: the Terraform example: pubsink.tf, what `pubsink setup
//     --plan --format terraform --service-account …` prints for
//     gke/base/config.yaml (the objects and a service account per command
//     with its roles), and main.tf, the Workload Identity bindings of the
//     GKE manifests' Kubernetes service accounts and the Cloud Run
//     manifests' secret access.
//
// # Guarantees
//
// The tests fail when:
//
//   - terraform/pubsink.tf is not what setupplan renders for
//     gke/base/config.yaml today (`go test ./deploy -run
//     TestTerraformExample -update` rewrites it), or a manifest runs as
//     another service account than the plan's for its command
//     (pubsink-run, pubsink-reprocess, pubsink-audit), or main.tf binds
//     another Kubernetes service account than the manifest's;
//   - an alert rule, the Rules resource, an alert unit test or a dashboard
//     query names a metric that pubsink does not export, filters a metric by
//     a label it does not have, or takes a rate of a gauge; or an alert has
//     no severity or no promtool unit test;
//   - gke/base/rules.yaml is not prometheus/alerts.yaml's groups as a Rules
//     resource (the file has one source; `go test ./deploy -run
//     TestRulesResource -update` rewrites the copy);
//   - cloudrun/alert-policies/ is not one policy per alert rule of
//     prometheus/alerts.yaml, with its name, group, expression,
//     for-duration and labels, naming exported metrics only (`go test
//     ./deploy -run TestAlertPolicies -update` rewrites the folder);
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
//     (the shutdown budget, the probes, the emulators' health checks);
//   - the compose Pub/Sub emulator runs without the agent: no build from a
//     context holding its sources, a Dockerfile that does not compile them
//     with the build script or puts the jar elsewhere than JAVA_OPTS names,
//     an ignore file that does not send them; or the script, run here
//     against the installed emulator (with a JDK; skipped without, failed
//     under CI=true), builds a jar the emulator does not load;
//   - a Cloud Run manifest lacks the metrics sidecar (Google's image,
//     pinned, started after pubsink, with rungmp-config.yaml mounted where
//     it reads it), or pubsink is not the service's ingress container, or
//     rungmp-config.yaml scrapes another port or path than pubsink serves
//     under the manifest, whatever http.addr the configuration secret sets;
//   - a reprocess job (gke/jobs/reprocess.yaml, cloudrun/reprocess-job.yaml)
//     runs another image, service account or configuration than the
//     Deployment or the service, names a pipeline the configuration lacks,
//     gives both or neither of --from and --snapshot, is not retried on
//     failure (exit 1, or 3 when stopped: a retry resumes), or is picked up
//     by the Deployment's selector, its disruption budget or its scraping
//     (main_test.go also parses the jobs' args with the real command).
//
// The list of exported metrics is written in the test (exportedMetrics): it
// is the contract of docs/reference.md, "Metrics".
package deploy
