package app

import (
	"context"
	"fmt"
	"os"
	"strings"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2"
	"google.golang.org/api/option"

	"github.com/pubsink/pubsink/internal/metrics"
)

// The one place the commands open their clients: against Google Cloud, or
// the emulators that PUBSUB_EMULATOR_HOST and BIGTABLE_EMULATOR_HOST name
// (the client libraries read those themselves). The caller closes them.

func openPubSub(ctx context.Context, project string, opts ...option.ClientOption) (*pubsub.Client, error) {
	opts = append([]option.ClientOption{pubsubCodecOption()}, opts...)
	c, err := pubsub.NewClient(ctx, project, opts...)
	if err != nil {
		return nil, fmt.Errorf("pubsub client: %w", credentialsHint(err))
	}
	return c, nil
}

// openBigtable opens a data client of instance whose requests name the app
// profile profile ("": the instance's default profile). A profile belongs to
// one instance and decides its requests' routing: every table is read and
// written through the profile its configuration names (state.app_profile,
// sink.app_profile). With m, the client counts the rows it mutates in m's
// pubsink_bigtable_mutations_total (metrics.BigtableClientOptions, which
// also covers the emulator, where the library ignores dial options).
func openBigtable(ctx context.Context, project, instance, profile string, m *metrics.Metrics) (*bigtable.Client, error) {
	var opts []option.ClientOption
	if m != nil {
		var err error
		if opts, err = m.BigtableClientOptions(); err != nil {
			return nil, fmt.Errorf("bigtable client for instance %s: %w", instance, err)
		}
	}
	c, err := bigtable.NewClientWithConfig(ctx, project, instance, bigtable.ClientConfig{AppProfile: profile}, opts...)
	if err != nil {
		return nil, fmt.Errorf("bigtable client for instance %s: %w", instance, credentialsHint(err))
	}
	return c, nil
}

func openBigtableAdmin(ctx context.Context, project, instance string) (*bigtable.AdminClient, error) {
	c, err := bigtable.NewAdminClient(ctx, project, instance)
	if err != nil {
		return nil, fmt.Errorf("bigtable admin client for instance %s: %w", instance, credentialsHint(err))
	}
	return c, nil
}

// credentialsHint adds to a client library's failure to find application
// default credentials the two ways out: the local emulators (most likely
// meant when nothing is set up yet) or credentials for Google Cloud. The
// libraries have no sentinel for it, only this text (cloud.google.com/go/auth
// "credentials: could not find…", golang.org/x/oauth2 "google: could not
// find…").
func credentialsHint(err error) error {
	if !strings.Contains(err.Error(), "could not find default credentials") {
		return err
	}
	return fmt.Errorf("%w; for the local emulators, set PUBSUB_EMULATOR_HOST and BIGTABLE_EMULATOR_HOST to their host:port (%s); for Google Cloud, run `gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS",
		err, emulatorsSet())
}

// emulatorsSet says which of the emulator variables this process has.
func emulatorsSet() string {
	var set, unset []string
	for _, v := range []string{"PUBSUB_EMULATOR_HOST", "BIGTABLE_EMULATOR_HOST"} {
		if os.Getenv(v) != "" {
			set = append(set, v)
		} else {
			unset = append(unset, v)
		}
	}
	switch {
	case len(set) == 0:
		return "neither is set"
	case len(unset) == 0:
		return "both are set"
	}
	return unset[0] + " is not set"
}
