package deploy

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2/hclwrite"

	"github.com/pubsink/pubsink/internal/testenv/hclread"
	"github.com/pubsink/pubsink/setupplan"
)

const (
	terraformPlanFile = "terraform/pubsink.tf"
	terraformMainFile = "terraform/main.tf"
)

// terraformCommands are the commands whose service accounts the Terraform
// example creates, as main.tf's comment gives the command that makes
// pubsink.tf.
var terraformCommands = []string{
	setupplan.CommandRun, setupplan.CommandReprocess, setupplan.CommandAudit,
	setupplan.CommandDeadLetterInspect, setupplan.CommandDeadLetterReplay,
}

// planAccount is the Google service account that the Terraform example
// creates for command, as the manifests name it.
func planAccount(command string) string {
	return setupplan.AccountID(command) + "@PROJECT_ID.iam.gserviceaccount.com"
}

// TestTerraformExampleIsTheGeneratedPlan: terraform/pubsink.tf is, byte
// for byte, what `pubsink setup -c deploy/gke/base/config.yaml --plan
// --format terraform --service-account …` prints for the commands of
// main.tf's comment, so it cannot drift from the configuration or from
// the plan; -update rewrites it.
func TestTerraformExampleIsTheGeneratedPlan(t *testing.T) {
	cfg := parseConfig(t, string(readFile(t, baseConfigFile)))
	var accounts []setupplan.Account
	for _, c := range terraformCommands {
		accounts = append(accounts, setupplan.Account{Command: c})
	}
	accounts, err := setupplan.WithRoles(cfg, accounts)
	if err != nil {
		t.Fatal(err)
	}
	want := setupplan.Terraform(setupplan.New(cfg), setupplan.Vars{
		Project: cfg.Project, Instance: cfg.State.Instance, Region: setupplan.DefaultRegion, Accounts: accounts,
	})
	if *update {
		if err := os.WriteFile(terraformPlanFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", terraformPlanFile)
	}
	if got := readFile(t, terraformPlanFile); !bytes.Equal(got, want) {
		t.Errorf("%s is not the plan of %s: run `go test ./deploy -run TestTerraformExample -update` (or the command in %s)", terraformPlanFile, baseConfigFile, terraformMainFile)
	}
	main := string(readFile(t, terraformMainFile))
	for _, c := range terraformCommands {
		if !strings.Contains(main, "--service-account "+c+" ") && !strings.Contains(main, "--service-account "+c+"\n") {
			t.Errorf("%s's comment does not give --service-account %s, which %s has", terraformMainFile, c, terraformPlanFile)
		}
	}
}

// TestTerraformExampleBindsTheManifestsAccounts: both files parse
// (hcl/v2) and are formatted as terraform fmt formats them; every service
// account main.tf refers to is one pubsink.tf creates; and the manifests
// run as the accounts of the plan: the GKE Deployment's, reprocess's and
// audit's Kubernetes service accounts are bound by Workload Identity to
// pubsink-run, pubsink-reprocess and pubsink-audit, and the Cloud Run
// manifests name those Google accounts.
func TestTerraformExampleBindsTheManifestsAccounts(t *testing.T) {
	accounts := map[string]bool{}
	var mainText string
	resources := map[string]hclread.Resource{}
	for _, file := range []string{terraformPlanFile, terraformMainFile} {
		src := readFile(t, file)
		if !bytes.Equal(hclwrite.Format(src), src) {
			t.Errorf("%s is not formatted as terraform fmt would", file)
		}
		rs, err := hclread.Resources(src)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for _, r := range rs {
			resources[r.Type+"."+r.Name] = r
			if r.Type == "google_service_account" {
				id, err := hclread.Attr(r.Body, "account_id")
				if err != nil {
					t.Fatal(err)
				}
				accounts[id] = true
			}
		}
		if file == terraformMainFile {
			mainText = string(src)
		}
	}
	for _, c := range terraformCommands {
		if !accounts[setupplan.AccountID(c)] {
			t.Errorf("%s creates no account %s", terraformPlanFile, setupplan.AccountID(c))
		}
	}
	for _, ref := range []string{"google_service_account.run.", "google_service_account.reprocess.", "google_service_account.audit.", "google_service_account.deadletter_inspect.", "google_service_account.deadletter_replay."} {
		if strings.Contains(mainText, ref) {
			if _, ok := resources[strings.TrimSuffix(ref, ".")]; !ok {
				t.Errorf("%s refers to %s, which %s does not create", terraformMainFile, strings.TrimSuffix(ref, "."), terraformPlanFile)
			}
		}
	}

	// GKE: the Kubernetes service account of each command, bound to its
	// Google one.
	gke := map[string]string{
		setupplan.CommandRun:       str(readManifest(t, "gke/base/deployment.yaml"), "spec", "template", "spec", "serviceAccountName"),
		setupplan.CommandReprocess: str(readManifest(t, gkeReprocessJob), "spec", "template", "spec", "serviceAccountName"),
		setupplan.CommandAudit:     str(readManifest(t, gkeAuditJob), "spec", "template", "spec", "serviceAccountName"),
	}
	if gke[setupplan.CommandRun] != runServiceAccount {
		t.Errorf("the Deployment runs as %q, want %q", gke[setupplan.CommandRun], runServiceAccount)
	}
	for c, ksa := range gke {
		r, ok := resources["google_service_account_iam_member."+c+"_workload_identity"]
		if !ok {
			t.Errorf("%s has no Workload Identity binding for %s", terraformMainFile, c)
			continue
		}
		attr := func(k string) string {
			v, err := hclread.Attr(r.Body, k)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		if got := attr("service_account_id"); got != "google_service_account."+c+".name" {
			t.Errorf("%s's binding: service_account_id = %s", c, got)
		}
		if got, want := attr("member"), "serviceAccount:${var.project}.svc.id.goog[${var.namespace}/"+ksa+"]"; got != want {
			t.Errorf("%s's binding: member = %s, want %s (the Kubernetes service account its manifest runs as)", c, got, want)
		}
		if got := attr("role"); got != "roles/iam.workloadIdentityUser" {
			t.Errorf("%s's binding: role = %s", c, got)
		}
	}
	if sa := readManifest(t, "gke/base/serviceaccount.yaml"); str(sa, "metadata", "name") != runServiceAccount ||
		str(sa, "metadata", "annotations", "iam.gke.io/gcp-service-account") != planAccount(setupplan.CommandRun) {
		t.Errorf("gke/base/serviceaccount.yaml: %s annotated %q, want %s annotated %s", str(sa, "metadata", "name"),
			str(sa, "metadata", "annotations", "iam.gke.io/gcp-service-account"), runServiceAccount, planAccount(setupplan.CommandRun))
	}
	if !strings.Contains(string(readFile(t, gkeAuditJob)), "iam.gke.io/gcp-service-account="+planAccount(setupplan.CommandAudit)) ||
		!strings.Contains(string(readFile(t, gkeReprocessJob)), "iam.gke.io/gcp-service-account="+planAccount(setupplan.CommandReprocess)) {
		t.Errorf("the GKE jobs' instructions do not annotate their service accounts with the plan's (%s, %s)", planAccount(setupplan.CommandAudit), planAccount(setupplan.CommandReprocess))
	}
	overlay := string(readFile(t, exampleOverlay+"/kustomization.yaml"))
	if !strings.Contains(overlay, "value: "+setupplan.AccountID(setupplan.CommandRun)+"@my-project.iam.gserviceaccount.com") {
		t.Errorf("%s does not set the Workload Identity annotation to the plan's account %s@my-project…", exampleOverlay, setupplan.AccountID(setupplan.CommandRun))
	}

	// Cloud Run: the manifests name the Google accounts.
	for file, c := range map[string]string{
		"cloudrun/workerpool.yaml": setupplan.CommandRun, "cloudrun/service.yaml": setupplan.CommandRun,
		cloudRunReprocessJob: setupplan.CommandReprocess, cloudRunAuditJob: setupplan.CommandAudit,
	} {
		m := readManifest(t, file)
		got := str(m, "spec", "template", "spec", "serviceAccountName")
		if got == "" {
			got = str(m, "spec", "template", "spec", "template", "spec", "serviceAccountName")
		}
		if got != planAccount(c) {
			t.Errorf("%s runs as %q, want %s's account of the plan, %s", file, got, c, planAccount(c))
		}
	}
}
