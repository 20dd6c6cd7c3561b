package validate

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const manifestPath = "../daemonset.yaml"

// The port `watch --prometheus` listens on, and the capabilities of
// examples/systemd/tenge-trace-watch.service (Kubernetes spells them
// without CAP_).
const metricsPort = 9433

var wantCapabilities = []corev1.Capability{"BPF", "PERFMON", "NET_ADMIN", "SYS_ADMIN", "SYSLOG", "SYS_RESOURCE"}

// A mount the pod needs: the host's directory, read only or not, and how
// the host's later mounts reach it.
type hostMount struct {
	hostPath    string
	pathType    corev1.HostPathType
	readOnly    bool
	propagation corev1.MountPropagationMode
}

var wantMounts = map[string]hostMount{
	// BTF: CO-RE relocations and tp_btf programs.
	"/sys/kernel/btf": {"/sys/kernel/btf", corev1.HostPathDirectory, true, ""},
	// tracefs: ids of the classic tracepoints (the fallback).
	"/sys/kernel/tracing": {"/sys/kernel/tracing", corev1.HostPathDirectory, true, ""},
	// --netns NAME: each namespace is a mount the host may add later.
	"/run/netns": {"/run/netns", corev1.HostPathDirectoryOrCreate, true, corev1.MountPropagationHostToContainer},
}

// The documents of the manifest, decoded.
type manifest struct {
	namespace *corev1.Namespace
	daemonSet *appsv1.DaemonSet
}

// The API types of k8s.io/api, without client-go.
func newScheme() *runtime.Scheme {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	return scheme
}

// decode splits the YAML stream into documents and decodes each as the API
// server does with fieldValidation=Strict: the kind from apiVersion and
// kind, unknown fields, duplicate fields and wrong types are errors.
func decode(data []byte) (manifest, error) {
	scheme := newScheme()
	decoder := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme, scheme,
		kjson.SerializerOptions{Yaml: true, Strict: true})
	var m manifest
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 0; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return m, fmt.Errorf("document %d: %w", i, err)
		}
		// A document of comments only is no object.
		if asJSON, err := yaml.YAMLToJSON(doc); err == nil && string(asJSON) == "null" {
			continue
		}
		obj, gvk, err := decoder.Decode(doc, nil, nil)
		if err != nil {
			return m, fmt.Errorf("document %d: %w", i, err)
		}
		switch o := obj.(type) {
		case *corev1.Namespace:
			if *gvk != corev1.SchemeGroupVersion.WithKind("Namespace") || m.namespace != nil {
				return m, fmt.Errorf("document %d: unexpected %v", i, gvk)
			}
			m.namespace = o
		case *appsv1.DaemonSet:
			if *gvk != appsv1.SchemeGroupVersion.WithKind("DaemonSet") || m.daemonSet != nil {
				return m, fmt.Errorf("document %d: unexpected %v", i, gvk)
			}
			m.daemonSet = o
		default:
			return m, fmt.Errorf("document %d: a %v, not a Namespace or a DaemonSet", i, gvk)
		}
	}
	if m.namespace == nil || m.daemonSet == nil {
		return m, errors.New("wants one Namespace and one DaemonSet")
	}
	return m, nil
}

// problems lists what is wrong with a decoded manifest for tenge-trace.
func problems(m manifest) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	fieldErrors := func(errs field.ErrorList) {
		for _, e := range errs {
			bad("%v", e)
		}
	}

	ns, ds := m.namespace, m.daemonSet
	fieldErrors(apivalidation.ValidateObjectMeta(&ns.ObjectMeta, false, apivalidation.NameIsDNSLabel, field.NewPath("namespace", "metadata")))
	fieldErrors(apivalidation.ValidateObjectMeta(&ds.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata")))
	if ds.Namespace != ns.Name {
		bad("the DaemonSet is in namespace %q, the manifest makes %q", ds.Namespace, ns.Name)
	}
	// The pods break the baseline level (host namespaces, hostPath, capabilities).
	if level := ns.Labels["pod-security.kubernetes.io/enforce"]; level != "privileged" {
		bad("namespace: pod-security.kubernetes.io/enforce is %q, not privileged: its pods would be refused", level)
	}

	template := ds.Spec.Template
	fieldErrors(metav1validation.ValidateLabels(template.Labels, field.NewPath("spec", "template", "metadata", "labels")))
	fieldErrors(apivalidation.ValidateAnnotations(template.Annotations, field.NewPath("spec", "template", "metadata", "annotations")))
	switch selector, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector); {
	case err != nil:
		bad("selector: %v", err)
	case ds.Spec.Selector == nil || selector.Empty():
		bad("selector: empty (apps/v1 requires one)")
	case !selector.Matches(labels.Set(template.Labels)):
		bad("selector %v does not match the template's labels %v", selector, template.Labels)
	}
	for key, want := range map[string]string{
		"prometheus.io/scrape": "true",
		"prometheus.io/port":   fmt.Sprint(metricsPort),
		"prometheus.io/path":   "/metrics",
	} {
		if got := template.Annotations[key]; got != want {
			bad("annotation %s is %q, not %q", key, got, want)
		}
	}

	pod := template.Spec
	if !pod.HostNetwork {
		bad("hostNetwork: false: the host's traffic would not be seen")
	}
	if !pod.HostPID {
		bad("hostPID: false: process names and netns inodes come from the host's /proc")
	}
	if pod.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		bad("dnsPolicy %q, not ClusterFirstWithHostNet", pod.DNSPolicy)
	}
	// Every node: a toleration of any key, any effect.
	if !slices.ContainsFunc(pod.Tolerations, func(t corev1.Toleration) bool {
		return t.Operator == corev1.TolerationOpExists && t.Key == "" && t.Effect == ""
	}) {
		bad("no toleration of every taint (operator: Exists): some nodes would go unwatched")
	}

	if len(pod.Containers) != 1 {
		bad("%d containers, not 1", len(pod.Containers))
		return out
	}
	c := pod.Containers[0]
	for _, msg := range validation.IsDNS1123Label(c.Name) {
		bad("container name %q: %s", c.Name, msg)
	}
	if ref := c.Image; ref == "" || !strings.Contains(ref[strings.LastIndex(ref, "/")+1:], ":") {
		bad("image %q: no tag", c.Image)
	}
	if len(c.Command) != 0 {
		bad("command %q replaces the image's entrypoint, /usr/bin/tenge-trace", c.Command)
	}
	out = append(out, argProblems(c.Args)...)
	out = append(out, portProblems(c)...)
	out = append(out, securityProblems(c.SecurityContext)...)
	out = append(out, mountProblems(c.VolumeMounts, pod.Volumes)...)

	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		request, hasRequest := c.Resources.Requests[name]
		limit, hasLimit := c.Resources.Limits[name]
		switch {
		case !hasRequest || !hasLimit:
			bad("resources: %s needs a request and a limit", name)
		case request.Cmp(limit) > 0:
			bad("resources: %s request %v above its limit %v", name, &request, &limit)
		}
	}
	return out
}

// argProblems: `watch`, serving metrics on the port.
func argProblems(args []string) []string {
	if len(args) == 0 || args[0] != "watch" {
		return []string{fmt.Sprintf("args %q: not `watch ...`", args)}
	}
	i := slices.Index(args, "--prometheus")
	if i < 0 || i+1 >= len(args) {
		return []string{fmt.Sprintf("args %q: no --prometheus ADDR:PORT", args)}
	}
	_, port, err := net.SplitHostPort(args[i+1])
	if err != nil || port != fmt.Sprint(metricsPort) {
		return []string{fmt.Sprintf("args: --prometheus %q does not listen on port %d", args[i+1], metricsPort)}
	}
	return nil
}

// portProblems: the port named metrics, and probes on what the server answers.
func portProblems(c corev1.Container) []string {
	var out []string
	ports := map[string]int32{}
	for _, p := range c.Ports {
		for _, msg := range validation.IsValidPortName(p.Name) {
			out = append(out, fmt.Sprintf("port name %q: %s", p.Name, msg))
		}
		ports[p.Name] = p.ContainerPort
		// With hostNetwork the host port is the container port (the API defaults it).
		if p.HostPort != 0 && p.HostPort != p.ContainerPort {
			out = append(out, fmt.Sprintf("port %s: hostPort %d differs from containerPort %d under hostNetwork", p.Name, p.HostPort, p.ContainerPort))
		}
		if p.Protocol != "" && p.Protocol != corev1.ProtocolTCP {
			out = append(out, fmt.Sprintf("port %s: %s, not TCP", p.Name, p.Protocol))
		}
	}
	if ports["metrics"] != metricsPort {
		out = append(out, fmt.Sprintf("no container port metrics: %d", metricsPort))
	}
	for what, probe := range map[string]*corev1.Probe{"readinessProbe": c.ReadinessProbe, "livenessProbe": c.LivenessProbe} {
		if probe == nil || probe.HTTPGet == nil {
			out = append(out, what+": not an httpGet")
			continue
		}
		get := probe.HTTPGet
		port := get.Port.IntVal
		if get.Port.Type == intstr.String {
			port = ports[get.Port.StrVal]
		}
		// The paths the metrics server answers 200 (metrics_server.rs).
		if port != metricsPort || (get.Path != "/metrics" && get.Path != "/") {
			out = append(out, fmt.Sprintf("%s: GET %s on port %v, not /metrics or / on %d", what, get.Path, get.Port.String(), metricsPort))
		}
		if get.Scheme != "" && get.Scheme != corev1.URISchemeHTTP {
			out = append(out, fmt.Sprintf("%s: %s, but no web config asks for TLS", what, get.Scheme))
		}
	}
	return out
}

// securityProblems: the six capabilities and nothing else, not privileged.
func securityProblems(sc *corev1.SecurityContext) []string {
	if sc == nil {
		return []string{"no securityContext: the runtime's default capabilities, not the six"}
	}
	var out []string
	if sc.Privileged == nil || *sc.Privileged {
		out = append(out, "privileged is not false")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		out = append(out, "readOnlyRootFilesystem is not true")
	}
	// Added capabilities reach root only (Kubernetes sets no ambient ones).
	if sc.RunAsUser == nil || *sc.RunAsUser != 0 || (sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) {
		out = append(out, "not running as root (uid 0): the added capabilities would not be effective")
	}
	// The API refuses this with CAP_SYS_ADMIN (validateContainerSecurityContext).
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		out = append(out, "allowPrivilegeEscalation: false with SYS_ADMIN")
	}
	if sc.Capabilities == nil {
		return append(out, "no capabilities: add and drop")
	}
	added := slices.Clone(sc.Capabilities.Add)
	slices.Sort(added)
	want := slices.Clone(wantCapabilities)
	slices.Sort(want)
	if !slices.Equal(added, want) {
		out = append(out, fmt.Sprintf("capabilities add %v, not %v", sc.Capabilities.Add, wantCapabilities))
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		out = append(out, fmt.Sprintf("capabilities drop %v, not [ALL]", sc.Capabilities.Drop))
	}
	return out
}

// mountProblems: every mount names a volume, and the host's directories are there.
func mountProblems(mounts []corev1.VolumeMount, volumes []corev1.Volume) []string {
	var out []string
	byName := map[string]corev1.Volume{}
	for _, v := range volumes {
		for _, msg := range validation.IsDNS1123Label(v.Name) {
			out = append(out, fmt.Sprintf("volume %q: %s", v.Name, msg))
		}
		if _, dup := byName[v.Name]; dup {
			out = append(out, fmt.Sprintf("volume %q twice", v.Name))
		}
		byName[v.Name] = v
	}
	got := map[string]hostMount{}
	for _, m := range mounts {
		v, ok := byName[m.Name]
		if !ok {
			out = append(out, fmt.Sprintf("volumeMount %s: no volume %q", m.MountPath, m.Name))
			continue
		}
		if m.MountPropagation != nil && *m.MountPropagation == corev1.MountPropagationBidirectional {
			out = append(out, fmt.Sprintf("volumeMount %s: Bidirectional needs a privileged container", m.MountPath))
		}
		if v.HostPath == nil {
			continue
		}
		mount := hostMount{hostPath: v.HostPath.Path, readOnly: m.ReadOnly}
		if v.HostPath.Type != nil {
			mount.pathType = *v.HostPath.Type
		}
		if m.MountPropagation != nil {
			mount.propagation = *m.MountPropagation
		}
		got[m.MountPath] = mount
	}
	for path, want := range wantMounts {
		if mount, ok := got[path]; !ok {
			out = append(out, fmt.Sprintf("no hostPath volume mounted at %s", path))
		} else if mount != want {
			out = append(out, fmt.Sprintf("mount %s: %+v, not %+v", path, mount, want))
		}
	}
	return out
}

func readManifest(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile(manifestPath)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestDaemonSetDecodesStrictlyAndHasWhatWatchNeeds(t *testing.T) {
	m, err := decode(readManifest(t))
	if err != nil {
		t.Fatalf("%s: %v", manifestPath, err)
	}
	for _, p := range problems(m) {
		t.Errorf("%s: %s", manifestPath, p)
	}
	c := m.daemonSet.Spec.Template.Spec.Containers[0]
	t.Logf("%s: Namespace %s, DaemonSet %s/%s: %s %q, capabilities %v",
		manifestPath, m.namespace.Name, m.daemonSet.Namespace, m.daemonSet.Name,
		c.Image, c.Args, c.SecurityContext.Capabilities.Add)
}

// The checks themselves: each mistake below, made in a copy of the
// manifest, must be caught, by the decoder or by problems().
func TestMistakesAreCaught(t *testing.T) {
	original := string(readManifest(t))
	// Mutations of a manifest that fails already would prove nothing.
	if m, err := decode([]byte(original)); err != nil || len(problems(m)) > 0 {
		t.Fatal("the manifest itself does not pass: see TestDaemonSetDecodesStrictlyAndHasWhatWatchNeeds")
	}
	for _, mistake := range []struct {
		name, old, new, want string
	}{
		{"a misspelt field", "hostNetwork: true", "hostNetwrok: true", `unknown field "spec.template.spec.hostNetwrok"`},
		{"a field twice", "hostPID: true", "hostPID: true\n      hostPID: false", `"hostPID" already set`},
		{"a wrong type", "containerPort: 9433", `containerPort: "9433"`, "cannot unmarshal string"},
		{"a bad quantity", "memory: 512Mi", "memory: 512MB", "quantities must match"},
		{"a misspelt kind", "kind: DaemonSet", "kind: Daemonset", `no kind "Daemonset" is registered`},
		{"an old API version", "apiVersion: apps/v1", "apiVersion: extensions/v1beta1", "extensions/v1beta1"},
		{"a capability missing", "SYSLOG, SYS_RESOURCE]", "SYSLOG]", "capabilities add"},
		{"a capability too many", "SYS_RESOURCE]", "SYS_RESOURCE, SYS_PTRACE]", "capabilities add"},
		{"CAP_ spelling", "[BPF,", "[CAP_BPF,", "capabilities add"},
		{"drop nothing", "drop: [ALL]", "drop: []", "capabilities drop"},
		{"privileged", "privileged: false", "privileged: true", "privileged is not false"},
		{"no host network", "hostNetwork: true", "hostNetwork: false", "hostNetwork"},
		{"no host PID", "hostPID: true", "hostPID: false", "hostPID"},
		{"writable root", "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false", "readOnlyRootFilesystem"},
		{"BTF not mounted", "mountPath: /sys/kernel/btf", "mountPath: /sys/kernel/btf2", "/sys/kernel/btf"},
		{"tracefs not mounted", "path: /sys/kernel/tracing", "path: /sys/kernel/debug", "mount /sys/kernel/tracing"},
		{"netns without propagation", "mountPropagation: HostToContainer", "mountPropagation: None", "mount /run/netns"},
		{"another port", "- 0.0.0.0:9433", "- 0.0.0.0:9434", "--prometheus"},
		{"no --prometheus", "            - --prometheus\n", "", "no --prometheus"},
		{"a probe elsewhere", "path: /\n", "path: /healthz\n", "livenessProbe"},
		{"a selector that misses", "matchLabels:\n      app.kubernetes.io/name: tenge-trace", "matchLabels:\n      app.kubernetes.io/name: other", "does not match"},
		{"an invalid label", "app.kubernetes.io/component: watch\n      annotations", "app.kubernetes.io/component: -watch\n      annotations", "labels"},
		{"baseline pod security", "enforce: privileged", "enforce: baseline", "pod-security"},
		{"another namespace", "namespace: tenge-trace", "namespace: default", "namespace"},
		{"no toleration", "- operator: Exists", "- operator: Exists\n          key: dedicated", "toleration"},
		{"a memory request above its limit", "memory: 128Mi", "memory: 1Gi", "memory request"},
	} {
		t.Run(mistake.name, func(t *testing.T) {
			if !strings.Contains(original, mistake.old) {
				t.Fatalf("the manifest has no %q to change", mistake.old)
			}
			changed := strings.Replace(original, mistake.old, mistake.new, 1)
			m, err := decode([]byte(changed))
			var found []string
			if err != nil {
				found = []string{err.Error()}
			} else {
				found = problems(m)
			}
			i := slices.IndexFunc(found, func(p string) bool { return strings.Contains(p, mistake.want) })
			if i < 0 {
				t.Fatalf("%q -> %q: want a finding with %q, got %q", mistake.old, mistake.new, mistake.want, found)
			}
			t.Logf("caught: %s", found[i])
		})
	}
}
