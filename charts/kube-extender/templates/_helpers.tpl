{{/*
Helpers of the kube-extender chart. The extender's configuration ("kube-extender.config") and the
scheduler's extenders entry ("kube-extender.schedulerEntry") are each rendered by ONE template here;
the ConfigMaps, the Deployment and NOTES.txt all include them, so they cannot drift apart.
*/}}

{{/* ---- names and labels ------------------------------------------------------------------ */}}

{{- define "kube-extender.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kube-extender.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "<fullname>-<suffix>", within the 63 characters of a label value or DNS label. */}}
{{- define "kube-extender.suffixed" -}}
{{- $ctx := index . 0 -}}{{- $suffix := index . 1 -}}
{{- printf "%s-%s" (include "kube-extender.fullname" $ctx | trunc (int (sub 62 (len $suffix))) | trimSuffix "-") $suffix -}}
{{- end -}}

{{- define "kube-extender.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kube-extender.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kube-extender.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kube-extender.labels" -}}
helm.sh/chart: {{ include "kube-extender.chart" . }}
{{ include "kube-extender.selectorLabels" . }}
app.kubernetes.io/version: {{ include "kube-extender.imageTag" . | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kube-extender
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "kube-extender.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kube-extender.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "kube-extender.imageTag" -}}
{{- default .Chart.AppVersion .Values.image.tag -}}
{{- end -}}

{{/* ---- mode, addresses, paths ----------------------------------------------------------------- */}}

{{/* "true" in second-scheduler mode, "" otherwise. */}}
{{- define "kube-extender.secondScheduler" -}}
{{- if .Values.scheduler.enabled -}}true{{- end -}}
{{- end -}}

{{- define "kube-extender.defaultSchedulerName" -}}
{{- if .Values.scheduler.enabled -}}kube-extender{{- else -}}default-scheduler{{- end -}}
{{- end -}}

{{/* Address the extender listens on: 0.0.0.0 standalone (the Service reaches it), the sidecar's address otherwise. */}}
{{- define "kube-extender.listenHost" -}}
{{- if .Values.scheduler.enabled -}}{{ .Values.scheduler.extenderListenAddress }}{{- else -}}0.0.0.0{{- end -}}
{{- end -}}

{{/* "true" when something outside the pod reaches the extender's port (Service, kubelet httpGet probes, Prometheus). */}}
{{- define "kube-extender.exposed" -}}
{{- if not (has (include "kube-extender.listenHost" .) (list "127.0.0.1" "::1")) -}}true{{- end -}}
{{- end -}}

{{/* Loopback host kube-scheduler uses to reach the sidecar (URL form). */}}
{{- define "kube-extender.loopbackHost" -}}
{{- if has .Values.scheduler.extenderListenAddress (list "::1" "::") -}}[::1]{{- else -}}127.0.0.1{{- end -}}
{{- end -}}

{{- define "kube-extender.scheme" -}}
{{- if .Values.tls.enabled -}}https{{- else -}}http{{- end -}}
{{- end -}}

{{- define "kube-extender.serviceHost" -}}
{{- $ip := .Values.service.clusterIP -}}
{{- if and $ip (ne $ip "None") -}}
{{- if contains ":" $ip -}}[{{ $ip }}]{{- else -}}{{ $ip }}{{- end -}}
{{- else -}}
{{- printf "%s.%s.svc" (include "kube-extender.fullname" .) .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{/* The urlPrefix kube-scheduler calls: given, or derived from the mode, the Service and TLS. */}}
{{- define "kube-extender.urlPrefix" -}}
{{- $c := .Values.config -}}
{{- if $c.extender.urlPrefix -}}
{{- $c.extender.urlPrefix -}}
{{- else if .Values.scheduler.enabled -}}
{{- printf "%s://%s:%d%s" (include "kube-extender.scheme" .) (include "kube-extender.loopbackHost" .) (int $c.server.port) $c.server.pathPrefix -}}
{{- else -}}
{{- printf "%s://%s:%d%s" (include "kube-extender.scheme" .) (include "kube-extender.serviceHost" .) (int .Values.service.port) $c.server.pathPrefix -}}
{{- end -}}
{{- end -}}

{{- define "kube-extender.portName" -}}
{{- if .Values.tls.enabled -}}https{{- else -}}http{{- end -}}
{{- end -}}

{{/* Where files are mounted. Extender container: */}}
{{- define "kube-extender.configDir" -}}/etc/kube-extender{{- end -}}
{{- define "kube-extender.configPath" -}}/etc/kube-extender/config.yaml{{- end -}}
{{- define "kube-extender.serverTlsDir" -}}/etc/kube-extender-tls/server{{- end -}}
{{- define "kube-extender.clientCADir" -}}/etc/kube-extender-tls/client-ca{{- end -}}
{{- define "kube-extender.probeTlsDir" -}}/etc/kube-extender-tls/probe{{- end -}}
{{/* kube-scheduler container: */}}
{{- define "kube-extender.schedulerConfigPath" -}}/etc/kubernetes/scheduler-config.yaml{{- end -}}
{{- define "kube-extender.schedulerCADir" -}}/etc/kubernetes/extender-tls/ca{{- end -}}
{{- define "kube-extender.schedulerClientDir" -}}/etc/kubernetes/extender-tls/client{{- end -}}

{{- define "kube-extender.leaseName" -}}
{{- default (include "kube-extender.fullname" .) .Values.config.leaderElection.leaseName -}}
{{- end -}}
{{- define "kube-extender.leaseNamespace" -}}
{{- default .Release.Namespace .Values.config.leaderElection.leaseNamespace -}}
{{- end -}}
{{- define "kube-extender.schedulerLeaseName" -}}
{{- default (include "kube-extender.suffixed" (list . "scheduler")) .Values.scheduler.leaderElection.resourceName -}}
{{- end -}}
{{- define "kube-extender.schedulerLeaseNamespace" -}}
{{- default .Release.Namespace .Values.scheduler.leaderElection.resourceNamespace -}}
{{- end -}}

{{/* ---- durations ------------------------------------------------------------------------------ */}}

{{/* A Go duration ("5s", "1m30s", "250ms", "0") in seconds, as a float string. */}}
{{- define "kube-extender.seconds" -}}
{{- $s := toString . -}}
{{- if eq $s "0" -}}0
{{- else -}}
{{- if not (regexMatch "^\\+?(([0-9]+(\\.[0-9]*)?|\\.[0-9]+)(h|ms|m|s|us|µs|μs|ns))+$" $s) -}}
{{- fail (printf "%q is not a duration (e.g. 5s, 1m30s, 250ms)" $s) -}}
{{- end -}}
{{- $units := dict "h" 3600.0 "m" 60.0 "s" 1.0 "ms" 0.001 "us" 0.000001 "µs" 0.000001 "μs" 0.000001 "ns" 0.000000001 -}}
{{- $total := 0.0 -}}
{{- range regexFindAll "([0-9]+(\\.[0-9]*)?|\\.[0-9]+)(h|ms|m|s|us|µs|μs|ns)" $s -1 -}}
{{- $unit := regexFind "(h|ms|m|s|us|µs|μs|ns)$" . -}}
{{- $total = addf $total (mulf (float64 (trimSuffix $unit .)) (get $units $unit)) -}}
{{- end -}}
{{- $total -}}
{{- end -}}
{{- end -}}

{{/* Seconds as kube-extender prints httpTimeout (extender/framework/durations.py format_duration):
     "5s", else in the largest of ms, us and ns that holds it whole ("2500ms", "1500us"). */}}
{{- define "kube-extender.goDuration" -}}
{{- $ns := int64 (round (mulf (float64 .) 1000000000.0) 0) -}}
{{- if eq (mod $ns 1000000000) 0 -}}{{ div $ns 1000000000 }}s
{{- else if eq (mod $ns 1000000) 0 -}}{{ div $ns 1000000 }}ms
{{- else if eq (mod $ns 1000) 0 -}}{{ div $ns 1000 }}us
{{- else -}}{{ $ns }}ns{{- end -}}
{{- end -}}

{{/* Seconds a Permit wait may last: httpTimeout minus the bind margin of 1s (half the timeout below 2s),
     as extender/runtime/handle.py EngineHandle.permit_budget computes it. */}}
{{- define "kube-extender.permitBudget" -}}
{{- $timeout := float64 (include "kube-extender.seconds" .Values.config.extender.httpTimeout) -}}
{{- $margin := minf 1.0 (mulf $timeout 0.5) -}}
{{- subf $timeout $margin -}}
{{- end -}}

{{/* ---- the extender configuration ------------------------------------------------------------- */}}

{{/* "true" when the extender lifts scheduling gates (admission.enabled): features.schedulingGates. */}}
{{- define "kube-extender.admissionEnabled" -}}
{{- if .Values.features.schedulingGates -}}true{{- end -}}
{{- end -}}

{{/* "true" when the extender patches pods: allocation annotations (binding), scheduling gates,
     nudges (config.requeue.nudge). */}}
{{- define "kube-extender.patchesPods" -}}
{{- $f := .Values.features -}}
{{- if or $f.binding (include "kube-extender.admissionEnabled" .) .Values.config.requeue.nudge -}}true{{- end -}}
{{- end -}}

{{/* "true" when a profile's plugins name Gang in any enabled or disabled list (the user decided). */}}
{{- define "kube-extender.namesGang" -}}
{{- range $point, $set := . -}}
{{- if kindIs "map" $set -}}
{{- range (get $set "enabled" | default list) -}}
{{- if and (kindIs "map" .) (eq (toString (get . "name")) "Gang") -}}true{{- end -}}
{{- end -}}
{{- range (get $set "disabled" | default list) -}}
{{- if kindIs "map" . -}}
{{- if eq (toString (get . "name")) "Gang" -}}true{{- end -}}
{{- else if eq (toString .) "Gang" -}}true
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The Gang plugin's args from gang.* (README "Gangs, scheduling gates and nudges"; policies/gang/args.py). */}}
{{- define "kube-extender.gangArgs" -}}
{{- $g := .Values.gang -}}
{{- toYaml (dict "permitTimeout" (toString $g.permitTimeout) "backoff" (toString $g.backoff) "reservationTimeout" (toString $g.reservationTimeout)) -}}
{{- end -}}

{{/* Profiles with their schedulerName filled in, as a YAML list. With features.gang every profile
     gets Gang at multiPoint (unless its plugins already name Gang, enabled or disabled) and a
     pluginConfig for Gang from gang.* (unless it has one: the profile's own wins). The values are
     copied, never changed: this template is included many times per render. */}}
{{- define "kube-extender.profiles" -}}
{{- $out := list -}}
{{- range .Values.config.profiles -}}
{{- $p := dict "schedulerName" (default (include "kube-extender.defaultSchedulerName" $) .schedulerName) -}}
{{- $plugins := deepCopy (.plugins | default dict) -}}
{{- $pluginConfig := deepCopy (.pluginConfig | default list) -}}
{{- if $.Values.features.gang -}}
{{- if not (include "kube-extender.namesGang" $plugins) -}}
{{- $multi := get $plugins "multiPoint" -}}
{{- if not (kindIs "map" $multi) -}}{{- $multi = dict -}}{{- end -}}
{{- $_ := set $multi "enabled" (append (get $multi "enabled" | default list) (dict "name" "Gang")) -}}
{{- $_ := set $plugins "multiPoint" $multi -}}
{{- end -}}
{{- $configured := false -}}
{{- range $pluginConfig -}}
{{- if and (kindIs "map" .) (eq (toString (get . "name")) "Gang") -}}{{- $configured = true -}}{{- end -}}
{{- end -}}
{{- if not $configured -}}
{{- $pluginConfig = append $pluginConfig (dict "name" "Gang" "args" (include "kube-extender.gangArgs" $ | fromYaml)) -}}
{{- end -}}
{{- end -}}
{{- with $plugins -}}{{- $_ := set $p "plugins" . -}}{{- end -}}
{{- with $pluginConfig -}}{{- $_ := set $p "pluginConfig" . -}}{{- end -}}
{{- $out = append $out $p -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* kube-scheduler's tlsConfig for calling the extender (only the keys that are set), as YAML. */}}
{{- define "kube-extender.schedulerTlsConfig" -}}
{{- $t := .Values.tls -}}
{{- $s := $t.scheduler -}}
{{- $out := dict -}}
{{- if $t.enabled -}}
{{- if and .Values.scheduler.enabled $s.caSecretName -}}
{{- $_ := set $out "caFile" (printf "%s/%s" (include "kube-extender.schedulerCADir" .) $s.caKey) -}}
{{- else if $s.caFile -}}
{{- $_ := set $out "caFile" $s.caFile -}}
{{- end -}}
{{- if and .Values.scheduler.enabled $s.clientSecretName -}}
{{- $_ := set $out "certFile" (printf "%s/tls.crt" (include "kube-extender.schedulerClientDir" .)) -}}
{{- $_ := set $out "keyFile" (printf "%s/tls.key" (include "kube-extender.schedulerClientDir" .)) -}}
{{- else if $s.certFile -}}
{{- $_ := set $out "certFile" $s.certFile -}}
{{- $_ := set $out "keyFile" $s.keyFile -}}
{{- end -}}
{{- with $s.serverName -}}{{- $_ := set $out "serverName" . -}}{{- end -}}
{{- if $s.insecure -}}{{- $_ := set $out "insecure" true -}}{{- end -}}
{{- end -}}
{{- if $out -}}{{- toYaml $out -}}{{- end -}}
{{- end -}}

{{/* The ExtenderConfiguration document (config.yaml of the ConfigMap). */}}
{{- define "kube-extender.config" -}}
{{- $v := .Values -}}
{{- $c := $v.config -}}
{{- $e := $c.extender -}}
{{- $extender := dict "urlPrefix" (include "kube-extender.urlPrefix" .) "filterVerb" $e.filterVerb "prioritizeVerb" $e.prioritizeVerb "preemptVerb" $e.preemptVerb "bindVerb" (ternary $e.bindVerb "" $v.features.binding) "weight" (int $e.weight) "httpTimeout" $e.httpTimeout "nodeCacheCapable" $e.nodeCacheCapable "ignorable" $e.ignorable -}}
{{- with include "kube-extender.schedulerTlsConfig" . -}}{{- $_ := set $extender "tlsConfig" (fromYaml .) -}}{{- end -}}
{{- $s := $c.server -}}
{{- $server := dict "host" (include "kube-extender.listenHost" .) "port" (int $s.port) "pathPrefix" $s.pathPrefix "worker" $s.worker "connections" (int $s.connections) "threads" (int $s.threads) "maxRequestBytes" (toString $s.maxRequestBytes) "logLevel" $s.logLevel "logFormat" $s.logFormat -}}
{{- if $v.tls.enabled -}}
{{- $tls := dict "certFile" (printf "%s/tls.crt" (include "kube-extender.serverTlsDir" .)) "keyFile" (printf "%s/tls.key" (include "kube-extender.serverTlsDir" .)) -}}
{{- if $v.tls.clientVerification.enabled -}}
{{- $_ := set $tls "clientCAFile" (printf "%s/%s" (include "kube-extender.clientCADir" .) $v.tls.clientVerification.caKey) -}}
{{- end -}}
{{- $_ := set $server "tls" $tls -}}
{{- end -}}
{{- $resources := list -}}
{{- range $c.managedResources -}}
{{- $resources = append $resources (dict "name" .name "ignoredByScheduler" (ternary .ignoredByScheduler true (hasKey . "ignoredByScheduler"))) -}}
{{- end -}}
{{- $le := $c.leaderElection -}}
{{- $lease := dict "enabled" $le.enabled "leaseName" (include "kube-extender.leaseName" .) "leaseNamespace" (include "kube-extender.leaseNamespace" .) "leaseDuration" $le.leaseDuration "renewDeadline" $le.renewDeadline "retryPeriod" $le.retryPeriod -}}
{{- $a := $c.admission -}}
{{- /* the extender lifts gates only when the chart lets it patch pods for that (features.schedulingGates) */ -}}
{{- $admission := dict "enabled" (include "kube-extender.admissionEnabled" . | eq "true") "gate" $a.gate "strategy" $a.strategy "interval" (toString $a.interval) "resync" (toString $a.resync) "holdTimeout" (toString $a.holdTimeout) -}}
{{- $r := $c.requeue -}}
{{- $requeue := dict "nudge" $r.nudge "qps" (float64 $r.qps) "minInterval" (toString $r.minInterval) -}}
apiVersion: kube-extender.io/v1alpha1
kind: ExtenderConfiguration
managedResources:
{{- toYaml $resources | nindent 2 }}
annotationPrefix: {{ $c.annotationPrefix | quote }}
extender:
{{- toYaml $extender | nindent 2 }}
server:
{{- toYaml $server | nindent 2 }}
cache:
{{- toYaml (dict "assumedPodTTL" (toString $c.cache.assumedPodTTL) "orphanCollectionInterval" $c.cache.orphanCollectionInterval) | nindent 2 }}
leaderElection:
{{- toYaml $lease | nindent 2 }}
admission:
{{- toYaml $admission | nindent 2 }}
requeue:
{{- toYaml $requeue | nindent 2 }}
kubernetes:
{{- toYaml (dict "watchTimeout" $c.kubernetes.watchTimeout "events" $c.kubernetes.events) | nindent 2 }}
profiles:
{{- include "kube-extender.profiles" . | nindent 2 }}
{{- end -}}

{{/* ---- the scheduler side --------------------------------------------------------------------- */}}

{{/* A scalar as PyYAML's safe_dump writes it (plain when it can be, else single-quoted), so the
     entry below is the same text `kube-extender config scheduler` prints. */}}
{{- define "kube-extender.yamlScalar" -}}
{{- if kindIs "bool" . -}}{{ . }}
{{- else if or (kindIs "float64" .) (kindIs "int64" .) (kindIs "int" .) -}}{{ int64 . }}
{{- else -}}
{{- $s := toString . -}}
{{- $special := or (regexMatch "^(yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF|~|null|Null|NULL|<<|=|)$" $s) (regexMatch "^[-+]?(0b[0-1_]+|0[0-7_]+|0|[1-9][0-9_]*|0x[0-9a-fA-F_]+|[1-9][0-9_]*(:[0-5]?[0-9])+)$" $s) (regexMatch "^([-+]?[0-9][0-9_]*\\.[0-9_]*([eE][-+][0-9]+)?|\\.[0-9][0-9_]*([eE][-+][0-9]+)?|[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+\\.[0-9_]*|[-+]?\\.(inf|Inf|INF)|\\.(nan|NaN|NAN))$" $s) (regexMatch "^[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}" $s) -}}
{{- if and (not $special) (regexMatch "^[A-Za-z0-9_./~+=][A-Za-z0-9_./:~+=@\\[\\]-]*$" $s) -}}
{{- $s -}}
{{- else -}}
'{{ replace "'" "''" $s }}'
{{- end -}}
{{- end -}}
{{- end -}}

{{/* THE extenders entry (a YAML list item, key order as `kube-extender config scheduler`), built from the
     rendered extender configuration itself - kube-extender's cli.scheduler_entry in template form. */}}
{{- define "kube-extender.schedulerEntry" -}}
{{- $cfg := include "kube-extender.config" . | fromYaml -}}
{{- $e := $cfg.extender -}}
- urlPrefix: {{ include "kube-extender.yamlScalar" $e.urlPrefix }}
{{- range $key := list "filterVerb" "prioritizeVerb" "preemptVerb" "bindVerb" }}
{{- with get $e $key }}
  {{ $key }}: {{ include "kube-extender.yamlScalar" . }}
{{- end }}
{{- end }}
{{- if $e.prioritizeVerb }}
  weight: {{ include "kube-extender.yamlScalar" $e.weight }}
{{- end }}
  enableHTTPS: {{ hasPrefix "https://" $e.urlPrefix }}
{{- with $e.tlsConfig }}
  tlsConfig:
{{- range $key := list "caFile" "certFile" "keyFile" "serverName" "insecure" }}
{{- if hasKey $e.tlsConfig $key }}
    {{ $key }}: {{ include "kube-extender.yamlScalar" (get $e.tlsConfig $key) }}
{{- end }}
{{- end }}
{{- end }}
  httpTimeout: {{ include "kube-extender.goDuration" (include "kube-extender.seconds" $e.httpTimeout) }}
  nodeCacheCapable: {{ $e.nodeCacheCapable }}
  ignorable: {{ $e.ignorable }}
  managedResources:
{{- range $cfg.managedResources }}
  - name: {{ include "kube-extender.yamlScalar" .name }}
    ignoredByScheduler: {{ .ignoredByScheduler }}
{{- end }}
{{- end -}}

{{/* The KubeSchedulerConfiguration of second-scheduler mode. */}}
{{- define "kube-extender.schedulerConfig" -}}
{{- $sle := .Values.scheduler.leaderElection -}}
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
podMaxBackoffSeconds: {{ int .Values.scheduler.podMaxBackoffSeconds }}
{{- with .Values.scheduler.extraConfig }}
{{ toYaml . }}
{{- end }}
leaderElection:
  leaderElect: true
  resourceLock: leases
  resourceName: {{ include "kube-extender.schedulerLeaseName" . }}
  resourceNamespace: {{ include "kube-extender.schedulerLeaseNamespace" . }}
  leaseDuration: {{ $sle.leaseDuration }}
  renewDeadline: {{ $sle.renewDeadline }}
  retryPeriod: {{ $sle.retryPeriod }}
profiles:
{{- range include "kube-extender.profiles" . | fromYamlArray }}
{{- $p := merge (dict "schedulerName" .schedulerName) (deepCopy $.Values.scheduler.profileConfig) }}
{{- toYaml (list $p) | nindent 0 }}
{{- end }}
extenders:
{{ include "kube-extender.schedulerEntry" . }}
{{- end -}}

{{/* ---- probes ---------------------------------------------------------------------------------- */}}

{{/* A probe of the extender on a path: httpGet when the kubelet can reach the port without a client
     certificate, else an exec of a few lines of Python inside the container. Args: (list ctx path). */}}
{{- define "kube-extender.probeAction" -}}
{{- $ := index . 0 -}}{{- $path := index . 1 -}}{{- $timeout := index . 2 -}}
{{- $v := $.Values -}}
{{- if and (include "kube-extender.exposed" $) (not $v.tls.clientVerification.enabled) -}}
httpGet:
  path: {{ $path }}
  port: {{ include "kube-extender.portName" $ }}
  scheme: {{ upper (include "kube-extender.scheme" $) }}
{{- else -}}
{{- $host := include "kube-extender.loopbackHost" $ -}}
{{- if include "kube-extender.exposed" $ }}{{ $host = "127.0.0.1" }}{{ end -}}
exec:
  command:
    - {{ $v.probes.python | quote }}
    - "-c"
    - {{ printf "import ssl, sys, urllib.request as u; c = ssl._create_unverified_context(); len(sys.argv) > 2 and c.load_cert_chain(sys.argv[2], sys.argv[3]); u.urlopen(sys.argv[1], timeout=%d, context=c)" (int $timeout) | quote }}
    - {{ printf "%s://%s:%d%s" (include "kube-extender.scheme" $) $host (int $v.config.server.port) $path | quote }}
{{- if $v.tls.clientVerification.enabled }}
    - {{ printf "%s/tls.crt" (include "kube-extender.probeTlsDir" $) | quote }}
    - {{ printf "%s/tls.key" (include "kube-extender.probeTlsDir" $) | quote }}
{{- end }}
{{- end -}}
{{- end -}}

{{/* ---- RBAC ------------------------------------------------------------------------------------- */}}

{{/* The extender's cluster-wide rules, derived from the features (README "RBAC"). */}}
{{- define "kube-extender.clusterRules" -}}
{{- $f := .Values.features -}}
- apiGroups: [""]
  resources: [nodes]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [pods]
{{- if include "kube-extender.patchesPods" . }}
  verbs: [get, list, watch, patch]
{{- else }}
  verbs: [get, list, watch]
{{- end }}
{{- if $f.binding }}
- apiGroups: [""]
  resources: [pods/binding]
  verbs: [create]
{{- end }}
{{- if $f.preemption }}
- apiGroups: [""]
  resources: [pods/eviction]
  verbs: [create]
{{- end }}
{{- if or $f.binding $f.preemption }}
- apiGroups: [""]
  resources: [pods/status]
  verbs: [patch]
{{- end }}
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, list, watch]
{{- if .Values.config.kubernetes.events }}
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end }}
{{- if $f.gang }}
- apiGroups: [scheduling.x-k8s.io]
  resources: [podgroups]
  verbs: [get, list, watch]
{{- end }}
{{- if $f.quota }}
- apiGroups: [scheduling.x-k8s.io]
  resources: [elasticquotas]
  verbs: [get, list, watch]
{{- end }}
{{- end -}}
