# The worked example on Google Cloud with Terraform, instead of `pubsink
# setup`: pubsink.tf beside this file is what
#
#   pubsink setup -c deploy/gke/base/config.yaml --plan --format terraform \
#     --service-account run --service-account reprocess --service-account audit \
#     --service-account deadletter-inspect --service-account deadletter-replay
#
# prints (the topics, subscriptions, tables and GC policies setup creates,
# and a service account per command with exactly its roles:
# docs/reference.md, "IAM roles"). Regenerate it that way after changing
# the configuration; `go test ./deploy` fails while it differs, and
# `go test ./deploy -run TestTerraformExample -update` rewrites it.
#
# This file adds what runs the commands: the Workload Identity bindings of
# the GKE manifests' Kubernetes service accounts (deploy/gke), and, for the
# Cloud Run manifests (deploy/cloudrun), read access to the secrets they
# mount. The Bigtable instance and its app profile are not here (see the
# README, "On Google Cloud"): var.instance names an existing one.
#
#   cd deploy/terraform
#   terraform init
#   terraform apply -var project=my-project -var instance=my-instance
#
# The manifests name the accounts as pubsink-COMMAND@PROJECT_ID: replace
# PROJECT_ID as for the rest of the deployment.

variable "namespace" {
  type        = string
  description = "The Kubernetes namespace of the GKE deployment (the overlay's: deploy/gke/overlays/example sets pubsink-example)."
  default     = "pubsink"
}

# GKE: each Kubernetes service account acts as its command's Google service
# account (Workload Identity). pubsink runs the Deployment
# (deploy/gke/base/serviceaccount.yaml), pubsink-reprocess and pubsink-audit
# the jobs (deploy/gke/jobs/).
resource "google_service_account_iam_member" "run_workload_identity" {
  service_account_id = google_service_account.run.name
  role               = "roles/iam.workloadIdentityUser"
  member             = "serviceAccount:${var.project}.svc.id.goog[${var.namespace}/pubsink]"
}

resource "google_service_account_iam_member" "reprocess_workload_identity" {
  service_account_id = google_service_account.reprocess.name
  role               = "roles/iam.workloadIdentityUser"
  member             = "serviceAccount:${var.project}.svc.id.goog[${var.namespace}/pubsink-reprocess]"
}

resource "google_service_account_iam_member" "audit_workload_identity" {
  service_account_id = google_service_account.audit.name
  role               = "roles/iam.workloadIdentityUser"
  member             = "serviceAccount:${var.project}.svc.id.goog[${var.namespace}/pubsink-audit]"
}

# Cloud Run: the worker pool (or service) and the jobs read the
# configuration from the secret pubsink-config; the worker pool's metrics
# sidecar reads its own from pubsink-rungmp-config and writes the series
# with roles/monitoring.metricWriter, which run's roles hold already.
resource "google_secret_manager_secret_iam_member" "run_config" {
  project   = var.project
  secret_id = "pubsink-config"
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.run.email}"
}

resource "google_secret_manager_secret_iam_member" "run_rungmp_config" {
  project   = var.project
  secret_id = "pubsink-rungmp-config"
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.run.email}"
}

resource "google_secret_manager_secret_iam_member" "reprocess_config" {
  project   = var.project
  secret_id = "pubsink-config"
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.reprocess.email}"
}

resource "google_secret_manager_secret_iam_member" "audit_config" {
  project   = var.project
  secret_id = "pubsink-config"
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.audit.email}"
}

output "service_accounts" {
  description = "The email of each command's service account, as the manifests name them."
  value = {
    run                = google_service_account.run.email
    reprocess          = google_service_account.reprocess.email
    audit              = google_service_account.audit.email
    deadletter-inspect = google_service_account.deadletter_inspect.email
    deadletter-replay  = google_service_account.deadletter_replay.email
  }
}
