package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"io"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/gateway"
	"go.yaml.in/yaml/v3"
)

// The Kubernetes objects of deploy/kubernetes, with exactly the fields the
// manifests use: decoding is strict, so a misspelt or misplaced field fails.
type (
	k8sMeta struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	}
	k8sObject struct {
		APIVersion string            `yaml:"apiVersion"`
		Kind       string            `yaml:"kind"`
		Metadata   k8sMeta           `yaml:"metadata"`
		Type       string            `yaml:"type"`
		Data       map[string]string `yaml:"data"`
		StringData map[string]string `yaml:"stringData"`
		Spec       *k8sSpec          `yaml:"spec"`
	}
	// k8sService is a Service: its selector is a plain label map.
	k8sService struct {
		APIVersion string  `yaml:"apiVersion"`
		Kind       string  `yaml:"kind"`
		Metadata   k8sMeta `yaml:"metadata"`
		Spec       struct {
			Selector map[string]string `yaml:"selector"`
			Ports    []struct {
				Name       string `yaml:"name"`
				Port       int    `yaml:"port"`
				TargetPort string `yaml:"targetPort"`
			} `yaml:"ports"`
		} `yaml:"spec"`
	}
	k8sSpec struct {
		// Deployment
		Replicas *int `yaml:"replicas"`
		Selector *struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template *struct {
			Metadata k8sMeta `yaml:"metadata"`
			Spec     k8sPod  `yaml:"spec"`
		} `yaml:"template"`
	}
	k8sPod struct {
		SecurityContext struct {
			RunAsNonRoot   bool `yaml:"runAsNonRoot"`
			RunAsUser      int  `yaml:"runAsUser"`
			RunAsGroup     int  `yaml:"runAsGroup"`
			SeccompProfile struct {
				Type string `yaml:"type"`
			} `yaml:"seccompProfile"`
		} `yaml:"securityContext"`
		Containers                    []k8sContainer `yaml:"containers"`
		TerminationGracePeriodSeconds int            `yaml:"terminationGracePeriodSeconds"`
		Volumes                       []struct {
			Name      string `yaml:"name"`
			ConfigMap *struct {
				Name string `yaml:"name"`
			} `yaml:"configMap"`
			EmptyDir *struct{} `yaml:"emptyDir"`
		} `yaml:"volumes"`
	}
	k8sContainer struct {
		Name  string   `yaml:"name"`
		Image string   `yaml:"image"`
		Args  []string `yaml:"args"`
		Env   []struct {
			Name      string `yaml:"name"`
			ValueFrom struct {
				SecretKeyRef struct {
					Name     string `yaml:"name"`
					Key      string `yaml:"key"`
					Optional bool   `yaml:"optional"`
				} `yaml:"secretKeyRef"`
			} `yaml:"valueFrom"`
		} `yaml:"env"`
		Ports []struct {
			Name          string `yaml:"name"`
			ContainerPort int    `yaml:"containerPort"`
		} `yaml:"ports"`
		ReadinessProbe  *k8sProbe `yaml:"readinessProbe"`
		LivenessProbe   *k8sProbe `yaml:"livenessProbe"`
		SecurityContext *struct {
			AllowPrivilegeEscalation bool `yaml:"allowPrivilegeEscalation"`
			ReadOnlyRootFilesystem   bool `yaml:"readOnlyRootFilesystem"`
			Capabilities             struct {
				Drop []string `yaml:"drop"`
			} `yaml:"capabilities"`
		} `yaml:"securityContext"`
		VolumeMounts []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
			ReadOnly  bool   `yaml:"readOnly"`
		} `yaml:"volumeMounts"`
	}
	k8sProbe struct {
		HTTPGet struct {
			Path string `yaml:"path"`
			Port string `yaml:"port"`
		} `yaml:"httpGet"`
		PeriodSeconds    int `yaml:"periodSeconds"`
		FailureThreshold int `yaml:"failureThreshold"`
		TimeoutSeconds   int `yaml:"timeoutSeconds"`
	}
)

// loadManifests decodes every YAML document of deploy/kubernetes, strictly
// (a Service into services, the others into the map).
func loadManifests(t *testing.T, services map[string]*k8sService) map[string]*k8sObject {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "deploy", "kubernetes", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in deploy/kubernetes: %v", err)
	}
	objs := make(map[string]*k8sObject)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var doc yaml.Node
			if err := docs.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			var head struct {
				Kind string `yaml:"kind"`
			}
			if err := doc.Decode(&head); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			raw, err := yaml.Marshal(&doc)
			if err != nil {
				t.Fatal(err)
			}
			dec := yaml.NewDecoder(bytes.NewReader(raw))
			dec.KnownFields(true)
			if head.Kind == "Service" {
				var svc k8sService
				if err := dec.Decode(&svc); err != nil {
					t.Fatalf("%s: Service: %v", f, err)
				}
				services[svc.Metadata.Name] = &svc
				continue
			}
			var o k8sObject
			if err := dec.Decode(&o); err != nil {
				t.Fatalf("%s: %s: %v", f, head.Kind, err)
			}
			if o.APIVersion == "" || o.Kind == "" || o.Metadata.Name == "" {
				t.Fatalf("%s: a document without apiVersion, kind or metadata.name", f)
			}
			objs[o.Kind+"/"+o.Metadata.Name] = &o
		}
	}
	return objs
}

// TestKubernetesSidecar checks the manifests of deploy/kubernetes against
// each other, against serve's real flags and config loader, and against
// the image's user.
func TestKubernetesSidecar(t *testing.T) {
	t.Parallel()
	services := make(map[string]*k8sService)
	objs := loadManifests(t, services)
	dep, cm, svc := objs["Deployment/payments"], objs["ConfigMap/payments-retrysafe"], services["payments"]
	if dep == nil || cm == nil || svc == nil {
		t.Fatalf("want Deployment/payments, ConfigMap/payments-retrysafe, Service/payments; have %v", keys(objs))
	}
	if dep.APIVersion != "apps/v1" || cm.APIVersion != "v1" || svc.APIVersion != "v1" {
		t.Errorf("apiVersions: Deployment %s, ConfigMap %s, Service %s", dep.APIVersion, cm.APIVersion, svc.APIVersion)
	}
	// No Secret among the manifests: "kubectl apply" would replace the
	// real one with its placeholder. The documented "kubectl create
	// secret" step makes it, with every key the pod needs.
	for k := range objs {
		if strings.HasPrefix(k, "Secret/") {
			t.Errorf("deploy/kubernetes ships %s: applying it would overwrite the real Secret", k)
		}
	}
	secret := documentedSecret(t)
	spec := dep.Spec
	if spec.Template == nil || spec.Selector == nil {
		t.Fatal("the Deployment has no template or selector")
	}
	for k, v := range spec.Selector.MatchLabels {
		if spec.Template.Metadata.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the pod template's labels", k, v)
		}
	}
	pod := spec.Template.Spec
	var app, gw *k8sContainer
	for i := range pod.Containers {
		switch pod.Containers[i].Name {
		case "app":
			app = &pod.Containers[i]
		case "retrysafe":
			gw = &pod.Containers[i]
		}
	}
	if app == nil || gw == nil {
		t.Fatal("the pod needs an app container and a retrysafe container")
	}
	port := func(c *k8sContainer, name string) int {
		for _, p := range c.Ports {
			if p.Name == name {
				return p.ContainerPort
			}
		}
		t.Fatalf("container %s has no port %q", c.Name, name)
		return 0
	}

	// The args are serve's real flags, with $(VAR) from the container's env.
	env := make(map[string]bool)
	for _, e := range gw.Env {
		ref := e.ValueFrom.SecretKeyRef
		if ref.Name != secret.name {
			t.Errorf("env %s: secret %q, want %q (the one the header says to create)", e.Name, ref.Name, secret.name)
		}
		if !secret.keys[ref.Key] && !ref.Optional {
			t.Errorf("env %s: key %q is not in the documented kubectl create secret step and not optional", e.Name, ref.Key)
		}
		env[e.Name] = true
	}
	if len(gw.Args) == 0 || gw.Args[0] != "serve" {
		t.Fatalf("retrysafe args %q: want serve first", gw.Args)
	}
	varRef := regexp.MustCompile(`\$\(([A-Z0-9_]+)\)`)
	args := make([]string, 0, len(gw.Args)-1)
	for _, a := range gw.Args[1:] {
		args = append(args, varRef.ReplaceAllStringFunc(a, func(m string) string {
			name := varRef.FindStringSubmatch(m)[1]
			if !env[name] {
				t.Errorf("arg %q refers to $(%s), which the container does not define", a, name)
			}
			return "postgres://u@h/db"
		}))
	}
	var o serveOptions
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.flags(fs)
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		t.Fatalf("serve %q: %v (extra %q)", args, err, fs.Args())
	}
	if !env["RETRYSAFE_STORE"] || o.store != "postgres://u@h/db" {
		t.Errorf("--store %q: want it from the Secret through $(RETRYSAFE_STORE)", o.store)
	}
	if p := portOf(t, o.listen); p != port(gw, "http") {
		t.Errorf("--listen %s, containerPort http %d", o.listen, port(gw, "http"))
	}
	if p := portOf(t, o.adminListen); p != port(gw, "admin") || !strings.HasPrefix(o.adminListen, "0.0.0.0:") {
		t.Errorf("--admin-listen %s: want 0.0.0.0 (the kubelet probes the pod IP) on containerPort admin %d", o.adminListen, port(gw, "admin"))
	}
	if o.upstream != "http://127.0.0.1:"+strconv.Itoa(port(app, "app")) {
		t.Errorf("--upstream %s: want the app container's port on 127.0.0.1", o.upstream)
	}
	if sec := time.Duration(pod.TerminationGracePeriodSeconds) * time.Second; sec <= o.shutdownTimeout {
		t.Errorf("terminationGracePeriodSeconds %v must exceed --shutdown-timeout %v", sec, o.shutdownTimeout)
	}

	// Probes on the admin port.
	for name, p := range map[string]*k8sProbe{"/readyz": gw.ReadinessProbe, "/healthz": gw.LivenessProbe} {
		if p == nil || p.HTTPGet.Path != name || p.HTTPGet.Port != "admin" {
			t.Errorf("probe %s: %+v, want httpGet %s on port admin", name, p, name)
		}
	}
	// /readyz may take gateway.ReadyTimeout to answer 503 (a store that
	// refuses connections is retried): a shorter probe timeout would see a
	// timeout instead of the answer.
	if p := gw.ReadinessProbe; p != nil && time.Duration(p.TimeoutSeconds)*time.Second <= gateway.ReadyTimeout {
		t.Errorf("readinessProbe timeoutSeconds %d: want more than gateway.ReadyTimeout (%s)", p.TimeoutSeconds, gateway.ReadyTimeout)
	}
	// The Service sends traffic to the gateway, never straight to the app.
	for k, v := range svc.Spec.Selector {
		if spec.Template.Metadata.Labels[k] != v {
			t.Errorf("Service selector %s=%s does not match the pods", k, v)
		}
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort != "http" {
		t.Errorf("Service ports %+v: want one, targetPort http (the gateway)", svc.Spec.Ports)
	}

	// The routes file is the ConfigMap key mounted at --config, and the
	// gateway's real loader accepts it with serve's defaults.
	var configVolume, mountPath string
	for _, v := range pod.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == cm.Metadata.Name {
			configVolume = v.Name
		}
	}
	for _, m := range gw.VolumeMounts {
		if m.Name == configVolume {
			mountPath = m.MountPath
		}
	}
	if configVolume == "" || mountPath == "" || path.Dir(o.config) != mountPath {
		t.Fatalf("--config %s is not in the ConfigMap's mount (volume %q at %q)", o.config, configVolume, mountPath)
	}
	routesYAML, ok := cm.Data[path.Base(o.config)]
	if !ok {
		t.Fatalf("ConfigMap has no key %q", path.Base(o.config))
	}
	routesFile := filepath.Join(t.TempDir(), "routes.yaml")
	if err := os.WriteFile(routesFile, []byte(routesYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	defaults, err := o.policy()
	if err != nil {
		t.Fatalf("serve flags: %v", err)
	}
	routes, err := gateway.LoadConfigFile(routesFile, defaults)
	if err != nil {
		t.Fatalf("the ConfigMap's routes: %v", err)
	}
	if len(routes) != strings.Count(routesYAML, "- match:") {
		t.Errorf("loaded %d routes from:\n%s", len(routes), routesYAML)
	}
	for _, rt := range routes {
		if !rt.Policy.Bypass && rt.Policy.Lease <= o.upstreamTimeout {
			t.Errorf("route %s: lease %v must exceed --upstream-timeout %v", rt.Pattern, rt.Policy.Lease, o.upstreamTimeout)
		}
	}

	// Non-root, as the image's numeric USER; a writable /tmp on a read-only root.
	user := dockerfileUser(t)
	if !pod.SecurityContext.RunAsNonRoot || strconv.Itoa(pod.SecurityContext.RunAsUser)+":"+strconv.Itoa(pod.SecurityContext.RunAsGroup) != user {
		t.Errorf("pod runs as %d:%d (runAsNonRoot %v); the image's USER is %s",
			pod.SecurityContext.RunAsUser, pod.SecurityContext.RunAsGroup, pod.SecurityContext.RunAsNonRoot, user)
	}
	if gw.SecurityContext == nil || !gw.SecurityContext.ReadOnlyRootFilesystem || gw.SecurityContext.AllowPrivilegeEscalation {
		t.Errorf("retrysafe securityContext %+v: want a read-only root and no privilege escalation", gw.SecurityContext)
	}
	tmp := false
	for _, m := range gw.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.EmptyDir != nil && m.MountPath == "/tmp" {
				tmp = true
			}
		}
	}
	if !tmp {
		t.Error("no emptyDir at /tmp: with a read-only root the gateway has no temporary directory")
	}
}

func keys(m map[string]*k8sObject) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return n
}

// dockerfileUser returns the USER of deploy/Dockerfile.
func dockerfileUser(t *testing.T) string {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "deploy", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "USER "); ok {
			return strings.TrimSpace(rest)
		}
	}
	t.Fatal("deploy/Dockerfile has no USER")
	return ""
}
