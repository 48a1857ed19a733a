// Package deploy_test checks the deployment files in deploy/: the
// Kubernetes manifests decode strictly (no unknown or misspelt field)
// into the Kubernetes API types and agree with each other and with the
// flags of `raftps node`; the systemd unit starts the node from the
// shipped config file.
package deploy_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// decodeStrict decodes every YAML document of path into out(kind), by way
// of JSON (the API types carry JSON tags) with unknown fields refused.
func decodeStrict(t *testing.T, path string, out func(kind string) any) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if doc == nil {
			continue
		}
		kind, _ := doc["kind"].(string)
		target := out(kind)
		if target == nil {
			t.Fatalf("%s: unexpected kind %q", path, kind)
		}
		j, err := json.Marshal(doc)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		jd := json.NewDecoder(bytes.NewReader(j))
		jd.DisallowUnknownFields()
		if err := jd.Decode(target); err != nil {
			t.Fatalf("%s: %s does not decode strictly: %v", path, kind, err)
		}
		kinds = append(kinds, kind)
	}
	return kinds
}

func TestKubernetesManifests(t *testing.T) {
	var svc corev1.Service
	var sts appsv1.StatefulSet
	if k := decodeStrict(t, "kubernetes/service.yaml", func(kind string) any {
		if kind == "Service" {
			return &svc
		}
		return nil
	}); !slices.Equal(k, []string{"Service"}) {
		t.Fatalf("service.yaml kinds %v", k)
	}
	if k := decodeStrict(t, "kubernetes/statefulset.yaml", func(kind string) any {
		if kind == "StatefulSet" {
			return &sts
		}
		return nil
	}); !slices.Equal(k, []string{"StatefulSet"}) {
		t.Fatalf("statefulset.yaml kinds %v", k)
	}

	// The Service is headless and publishes not-ready pods (nodes must
	// find each other before they are ready).
	if svc.APIVersion != "v1" || svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses {
		t.Fatalf("service: apiVersion %q clusterIP %q publishNotReadyAddresses %v", svc.APIVersion, svc.Spec.ClusterIP, svc.Spec.PublishNotReadyAddresses)
	}
	if sts.APIVersion != "apps/v1" || sts.Spec.ServiceName != svc.Name {
		t.Fatalf("statefulset: apiVersion %q serviceName %q, want the Service %q", sts.APIVersion, sts.Spec.ServiceName, svc.Name)
	}
	for k, v := range svc.Spec.Selector {
		if sts.Spec.Template.Labels[k] != v || sts.Spec.Selector.MatchLabels[k] != v {
			t.Fatalf("the Service selects %s=%s, which the pods do not carry", k, v)
		}
	}
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
		t.Fatalf("replicas %v, want 3", sts.Spec.Replicas)
	}
	if len(sts.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%d containers", len(sts.Spec.Template.Spec.Containers))
	}
	c := sts.Spec.Template.Spec.Containers[0]
	flags := map[string]string{}
	if len(c.Args) == 0 || c.Args[0] != "node" {
		t.Fatalf("args %q: want `node ...`", c.Args)
	}
	for _, a := range c.Args[1:] {
		k, v, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !ok || !strings.HasPrefix(a, "--") {
			t.Fatalf("arg %q: want --flag=value", a)
		}
		flags[k] = v
	}
	if flags["bootstrap-expect"] != fmt.Sprint(*sts.Spec.Replicas) {
		t.Fatalf("--bootstrap-expect=%s with %d replicas", flags["bootstrap-expect"], *sts.Spec.Replicas)
	}
	// --join names every replica through the headless Service's DNS.
	join := strings.Split(flags["join"], ",")
	if len(join) != int(*sts.Spec.Replicas) {
		t.Fatalf("--join %q: want all %d replicas", flags["join"], *sts.Spec.Replicas)
	}
	for i, j := range join {
		want := fmt.Sprintf("%s-%d.%s.$(POD_NAMESPACE).svc.cluster.local:", sts.Name, i, svc.Name)
		if !strings.HasPrefix(j, want) {
			t.Fatalf("--join[%d] = %q, want %s<gossip port>", i, j, want)
		}
	}
	env := map[string]bool{}
	for _, e := range c.Env {
		env[e.Name] = e.ValueFrom != nil && e.ValueFrom.FieldRef != nil
	}
	for _, a := range c.Args {
		for _, ref := range []string{"POD_NAME", "POD_NAMESPACE", "POD_IP"} {
			if strings.Contains(a, "$("+ref+")") && !env[ref] {
				t.Fatalf("arg %q uses $(%s), which the container's env does not define from the downward API", a, ref)
			}
		}
	}
	// Every port a flag binds is a container port, named as the Service's
	// target ports.
	cports := map[string]int32{}
	for _, p := range c.Ports {
		cports[p.Name] = p.ContainerPort
	}
	for flag, name := range map[string]string{"grpc-addr": "grpc", "raft-addr": "raft", "gossip-addr": "gossip-tcp", "http-addr": "http"} {
		if !strings.HasSuffix(flags[flag], fmt.Sprintf(":%d", cports[name])) || cports[name] == 0 {
			t.Fatalf("--%s=%s but container port %q is %d", flag, flags[flag], name, cports[name])
		}
	}
	if cports["gossip-udp"] != cports["gossip-tcp"] {
		t.Fatal("gossip needs the same port over UDP and TCP")
	}
	for _, p := range svc.Spec.Ports {
		if _, ok := cports[p.TargetPort.StrVal]; !ok {
			t.Fatalf("service port %s targets %q, not a container port", p.Name, p.TargetPort.StrVal)
		}
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Fatal("readiness probe: want GET /readyz")
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Fatal("liveness probe: want GET /healthz")
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		mounted = mounted || (m.MountPath == flags["data-dir"] && len(sts.Spec.VolumeClaimTemplates) == 1 && sts.Spec.VolumeClaimTemplates[0].Name == m.Name)
	}
	if !mounted {
		t.Fatalf("--data-dir=%s is not the volume claim's mount", flags["data-dir"])
	}
}

// A misspelt field is refused by the strict decoding (the check above
// can fail).
func TestStrictDecodingRefusesUnknownFields(t *testing.T) {
	b, err := os.ReadFile("kubernetes/service.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(bytes.ReplaceAll(b, []byte("publishNotReadyAddresses"), []byte("publishNotReadyAdresses")), &doc); err != nil {
		t.Fatal(err)
	}
	j, _ := json.Marshal(doc)
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	var svc corev1.Service
	if err := dec.Decode(&svc); err == nil {
		t.Fatal("a misspelt field decoded without error")
	}
}

// The unit runs the installed binary on the shipped config file and
// restarts it on failure.
func TestSystemdUnit(t *testing.T) {
	f, err := os.Open("systemd/raftps.service")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	section := ""
	keys := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.Trim(line, "[]")
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("bad unit line %q", line)
			}
			keys[section+"."+k] = v
		}
	}
	for k, want := range map[string]string{
		"Service.ExecStart":  "/usr/local/bin/raftps node --config-file /etc/raftps/raftps.yaml",
		"Service.Restart":    "on-failure",
		"Service.KillSignal": "SIGTERM",
		"Install.WantedBy":   "multi-user.target",
	} {
		if keys[k] != want {
			t.Errorf("%s = %q, want %q", k, keys[k], want)
		}
	}
	var cfg map[string]any
	b, err := os.ReadFile("systemd/raftps.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg["data-dir"] != keys["Service.ReadWritePaths"] {
		t.Errorf("data-dir %v is not the unit's ReadWritePaths %q", cfg["data-dir"], keys["Service.ReadWritePaths"])
	}
}
