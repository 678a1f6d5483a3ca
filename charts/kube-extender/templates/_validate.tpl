{{/*
Impossible or unsafe combinations of values: `fail` with a message that names the values and the way
out. Included by configmap.yaml (always rendered), so `helm template`, `helm install` and
`helm upgrade` all stop before anything reaches the cluster. values.schema.json checks the types.
*/}}
{{- define "kube-extender.validate" -}}
{{- $v := .Values -}}
{{- $c := $v.config -}}
{{- $f := $v.features -}}
{{- $second := $v.scheduler.enabled -}}
{{- $replicas := int $v.replicaCount -}}

{{- /* replicas and leader election */ -}}
{{- if and (gt $replicas 1) (not $c.leaderElection.enabled) -}}
{{- fail (printf "replicaCount=%d needs config.leaderElection.enabled=true: without a leader every replica would reserve and bind on its own and the same resources would be handed out twice" $replicas) -}}
{{- end -}}
{{- if and $second (gt $replicas 1) -}}
{{- fail (printf "replicaCount=%d is not possible in second-scheduler mode (scheduler.enabled=true): kube-scheduler and its kube-extender sidecar elect their leaders separately, so the scheduling leader could call a standby sidecar that answers 503. Run one replica (the Deployment recreates it), or run kube-extender standalone with several replicas" $replicas) -}}
{{- end -}}
{{- $le := $c.leaderElection -}}
{{- $leaseDuration := float64 (include "kube-extender.seconds" $le.leaseDuration) -}}
{{- $renewDeadline := float64 (include "kube-extender.seconds" $le.renewDeadline) -}}
{{- $retryPeriod := float64 (include "kube-extender.seconds" $le.retryPeriod) -}}
{{- if not (and (lt 0.0 $retryPeriod) (lt $retryPeriod $renewDeadline) (lt $renewDeadline $leaseDuration)) -}}
{{- fail (printf "config.leaderElection needs 0 < retryPeriod (%s) < renewDeadline (%s) < leaseDuration (%s)" $le.retryPeriod $le.renewDeadline $le.leaseDuration) -}}
{{- end -}}
{{- /* the leader's API writes give up within leaseDuration - renewDeadline (its fence): at least 1s, as kube-extender's MIN_LEASE_GAP */ -}}
{{- if lt (sub (int64 (round (mulf $leaseDuration 1e9) 0)) (int64 (round (mulf $renewDeadline 1e9) 0))) 1000000000 -}}
{{- fail (printf "config.leaderElection.renewDeadline (%s) must be at least 1s below leaseDuration (%s): the leader's API writes give up within that gap, so that none lands after another replica may take the lease, and kube-apiserver may take a second for one" $le.renewDeadline $le.leaseDuration) -}}
{{- end -}}
{{- with $v.updateStrategy -}}
{{- if and $c.leaderElection.enabled (eq (toString .type) "RollingUpdate") -}}
{{- $mu := "25%" -}}{{- /* Kubernetes' default when rollingUpdate or its maxUnavailable is left out */ -}}
{{- if and .rollingUpdate (hasKey .rollingUpdate "maxUnavailable") -}}{{- $mu = .rollingUpdate.maxUnavailable -}}{{- end -}}
{{- if and (ne (toString $mu) "100%") (or (kindIs "string" $mu) (lt (int $mu) $replicas)) -}}
{{- fail (printf "updateStrategy.rollingUpdate.maxUnavailable=%v would never finish a rollout: with leader election only the leader is Ready, so the new pods cannot turn Ready while the old leader runs. Use maxUnavailable: 100%% (or %d), or type: Recreate" $mu $replicas) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /* verbs and features */ -}}
{{- if and $f.binding (not $c.extender.bindVerb) -}}
{{- fail "features.binding=true needs config.extender.bindVerb (e.g. bind); set features.binding=false to let kube-scheduler bind" -}}
{{- end -}}
{{- if not $f.preemption -}}
{{- range $i, $p := $c.profiles -}}
{{- $points := (kindIs "map" $p.plugins) | ternary $p.plugins dict -}}
{{- range $point := list "multiPoint" "postFilter" -}}
{{- $set := (kindIs "map" (get $points $point)) | ternary (get $points $point) dict -}}
{{- range (kindIs "slice" (get $set "enabled")) | ternary (get $set "enabled") list -}}
{{- $name := (kindIs "map" .) | ternary (toString (get . "name")) "" -}}
{{- if has $name (list "ManagedPreemption" "CapacityQuota") -}}
{{- fail (printf "config.profiles[%d] enables %s (%s), which evicts pods to make room: set features.preemption=true, which grants it RBAC pods/eviction create and pods/status patch (without them every eviction is refused)" $i $name $point) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and $f.gang (not $f.binding) -}}
{{- fail "features.gang=true needs features.binding=true: gang members wait for each other in Permit, which runs inside the extender's bind" -}}
{{- end -}}
{{- $timeout := float64 (include "kube-extender.seconds" $c.extender.httpTimeout) -}}
{{- if le $timeout 0.0 -}}
{{- fail "config.extender.httpTimeout must be positive (kube-scheduler treats 0 as 5s; say 5s)" -}}
{{- end -}}
{{- if lt $timeout 0.001 -}}
{{- fail (printf "config.extender.httpTimeout (%s) must be at least 1ms" $c.extender.httpTimeout) -}}
{{- end -}}
{{- if and $f.gang $c.extender.ignorable -}}
{{- fail "features.gang=true needs config.extender.ignorable=false: kube-scheduler binds a pod itself when an ignorable extender's bind fails, so a group denied in Permit would be bound in part" -}}
{{- end -}}
{{- if $f.gang -}}
{{- range $key := list "permitTimeout" "backoff" "reservationTimeout" -}}
{{- if le (float64 (include "kube-extender.seconds" (get $v.gang $key))) 0.0 -}}
{{- fail (printf "gang.%s (%v) must be positive (the Gang plugin refuses 0)" $key (get $v.gang $key)) -}}
{{- end -}}
{{- end -}}
{{- $budget := float64 (include "kube-extender.permitBudget" .) -}}
{{- $permit := float64 (include "kube-extender.seconds" $v.gang.permitTimeout) -}}
{{- if ge $permit $budget -}}
{{- fail (printf "gang.permitTimeout (%s) must be below the Permit budget of %gs: config.extender.httpTimeout (%s) minus the %gs kube-extender keeps to write the allocation and the Binding before kube-scheduler gives up on the bind call. Lower gang.permitTimeout or raise config.extender.httpTimeout" $v.gang.permitTimeout $budget $c.extender.httpTimeout (subf $timeout $budget)) -}}
{{- end -}}
{{- /* a profile's own pluginConfig for Gang replaces gang.*: its permitTimeout has the same budget */ -}}
{{- range $i, $p := $c.profiles -}}
{{- range $p.pluginConfig -}}
{{- if and (kindIs "map" .) (eq (toString (get . "name")) "Gang") (kindIs "map" (get . "args")) (hasKey (get . "args") "permitTimeout") -}}
{{- $own := get (get . "args") "permitTimeout" -}}
{{- $ownSeconds := 0.0 -}}
{{- if or (kindIs "float64" $own) (kindIs "int64" $own) (kindIs "int" $own) -}}
{{- $ownSeconds = float64 $own -}}
{{- else -}}
{{- $ownSeconds = float64 (include "kube-extender.seconds" $own) -}}
{{- end -}}
{{- if ge $ownSeconds $budget -}}
{{- fail (printf "config.profiles[%d].pluginConfig Gang args.permitTimeout (%v) must be below the Permit budget of %gs: config.extender.httpTimeout (%s) minus the %gs bind margin. Lower it or raise config.extender.httpTimeout" $i $own $budget $c.extender.httpTimeout (subf $timeout $budget)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $qps := float64 $c.requeue.qps -}}
{{- if or (lt $qps 0.1) (gt $qps 1000.0) -}}
{{- fail (printf "config.requeue.qps (%v) must be between 0.1 and 1000 nudges per second" $c.requeue.qps) -}}
{{- end -}}
{{- /* kube-extender's minima (extender/config/model.py _Admission): the admission loop's pace, its resync, a hold */ -}}
{{- range list (list "interval" 0.05 "50ms" "the least time between admission passes") (list "resync" 1.0 "1s" "how often every gated pod is evaluated again") (list "holdTimeout" 1.0 "1s" "how long an admitted pod holds its capacity before it is bound") -}}
{{- $value := get $c.admission (index . 0) -}}
{{- if lt (float64 (include "kube-extender.seconds" $value)) (index . 1) -}}
{{- fail (printf "config.admission.%s (%v) must be at least %s, the least kube-extender starts with (%s)" (index . 0) $value (index . 2) (index . 3)) -}}
{{- end -}}
{{- end -}}

{{- /* RBAC and the ServiceAccount */ -}}
{{- if and (not $v.rbac.create) (or $v.serviceAccount.create (not $v.serviceAccount.name)) -}}
{{- $needs := list "list/watch pods and nodes" -}}
{{- if $f.binding -}}{{- $needs = append $needs "create pods/binding and patch pods and pods/status (features.binding)" -}}{{- end -}}
{{- if $f.schedulingGates -}}{{- $needs = append $needs "patch pods to lift scheduling gates (features.schedulingGates)" -}}{{- end -}}
{{- if $c.requeue.nudge -}}{{- $needs = append $needs "patch pods to nudge them (config.requeue.nudge)" -}}{{- end -}}
{{- if $f.preemption -}}{{- $needs = append $needs "create pods/eviction and patch pods/status (features.preemption)" -}}{{- end -}}
{{- if $f.gang -}}{{- $needs = append $needs "read podgroups.scheduling.x-k8s.io (features.gang)" -}}{{- end -}}
{{- if $c.leaderElection.enabled -}}{{- $needs = append $needs "get/create/update its Lease" -}}{{- end -}}
{{- if $second -}}{{- $needs = append $needs "the kube-scheduler ClusterRoles (scheduler.enabled)" -}}{{- end -}}
{{- fail (printf "rbac.create=false leaves a ServiceAccount without rights, but kube-extender must %s. Set rbac.create=true, or serviceAccount.create=false with serviceAccount.name of an existing ServiceAccount that holds them" (join ", " $needs)) -}}
{{- end -}}

{{- /* TLS */ -}}
{{- $t := $v.tls -}}
{{- $ts := $t.scheduler -}}
{{- if $t.enabled -}}
{{- if not $t.secretName -}}
{{- fail "tls.enabled=true needs tls.secretName: a Secret of type kubernetes.io/tls (tls.crt, tls.key) with the extender's serving certificate" -}}
{{- end -}}
{{- $hasCA := or $ts.caFile (and $second $ts.caSecretName) -}}
{{- if and $ts.insecure $hasCA -}}
{{- fail "tls.scheduler.insecure=true together with a CA (tls.scheduler.caFile or caSecretName): kube-scheduler refuses to start with both; keep one" -}}
{{- end -}}
{{- if not (or $hasCA $ts.insecure) -}}
{{- fail (printf "tls.enabled=true: say how kube-scheduler verifies the extender's certificate: %s, or tls.scheduler.insecure=true to skip verification (kube-scheduler would otherwise skip it silently)" (ternary "tls.scheduler.caSecretName (a Secret with the CA, mounted into kube-scheduler)" "tls.scheduler.caFile (a path on the scheduler's host)" $second)) -}}
{{- end -}}
{{- if ne (toString (empty $ts.certFile)) (toString (empty $ts.keyFile)) -}}
{{- fail "tls.scheduler.certFile and tls.scheduler.keyFile go together" -}}
{{- end -}}
{{- if and (not $second) $ts.caSecretName -}}
{{- fail "tls.scheduler.caSecretName is mounted into the chart's kube-scheduler, which only exists with scheduler.enabled=true; for an existing kube-scheduler give tls.scheduler.caFile, a path on its host" -}}
{{- end -}}
{{- end -}}
{{- if $t.clientVerification.enabled -}}
{{- if not $t.enabled -}}
{{- fail "tls.clientVerification.enabled=true needs tls.enabled=true (client certificates are part of HTTPS)" -}}
{{- end -}}
{{- if not $t.clientVerification.caSecretName -}}
{{- fail "tls.clientVerification.enabled=true needs tls.clientVerification.caSecretName: a Secret with the CA bundle that signs kube-scheduler's client certificate" -}}
{{- end -}}
{{- if not $ts.clientSecretName -}}
{{- fail (printf "tls.clientVerification.enabled=true needs tls.scheduler.clientSecretName: a kubernetes.io/tls Secret with a client certificate signed by that CA, %s" (ternary "which kube-scheduler presents and the probes use" "which the extender's probes present (the kubelet cannot)" $second)) -}}
{{- end -}}
{{- if and (not $second) (not $ts.certFile) -}}
{{- fail "tls.clientVerification.enabled=true in standalone mode needs tls.scheduler.certFile and tls.scheduler.keyFile: the paths of the client certificate on the existing kube-scheduler's host, or it cannot call the extender" -}}
{{- end -}}
{{- end -}}
{{- with $c.extender.urlPrefix -}}
{{- if ne (hasPrefix "https://" .) $t.enabled -}}
{{- fail (printf "config.extender.urlPrefix %q must start with %s:// when tls.enabled=%v (kube-scheduler chooses TLS by the scheme alone)" . (include "kube-extender.scheme" $) $t.enabled) -}}
{{- end -}}
{{- end -}}

{{- /* profiles and the second scheduler */ -}}
{{- $names := list -}}
{{- range include "kube-extender.profiles" . | fromYamlArray -}}
{{- if has .schedulerName $names -}}
{{- fail (printf "config.profiles: schedulerName %q appears twice (an empty name means %q)" .schedulerName (include "kube-extender.defaultSchedulerName" $)) -}}
{{- end -}}
{{- $names = append $names .schedulerName -}}
{{- end -}}
{{- if and $second (has "default-scheduler" $names) -}}
{{- fail "scheduler.enabled=true with schedulerName default-scheduler: two schedulers would take the same pods. Give config.profiles a name of its own (pods then set spec.schedulerName to it), or run standalone beside the existing scheduler" -}}
{{- end -}}
{{- if $second -}}
{{- range $key := list "apiVersion" "kind" "leaderElection" "profiles" "extenders" -}}
{{- if hasKey $v.scheduler.extraConfig $key -}}
{{- fail (printf "scheduler.extraConfig.%s is rendered by the chart from the extender's values; remove it" $key) -}}
{{- end -}}
{{- end -}}
{{- $tag := toString $v.scheduler.image.tag -}}
{{- if regexMatch "^v?[0-9]+\\.[0-9]+" $tag -}}
{{- $parts := regexFind "^v?[0-9]+\\.[0-9]+" $tag | trimPrefix "v" | splitList "." -}}
{{- $cluster := list (.Capabilities.KubeVersion.Major | trimSuffix "+") (.Capabilities.KubeVersion.Minor | trimSuffix "+") -}}
{{- if or (gt (int (index $parts 0)) (int (index $cluster 0))) (and (eq (int (index $parts 0)) (int (index $cluster 0))) (gt (int (index $parts 1)) (int (index $cluster 1)))) -}}
{{- fail (printf "scheduler.image.tag %s is newer than the cluster (%s): kube-scheduler must not be newer than kube-apiserver. Set scheduler.image.tag to the cluster's version" $tag .Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /* exposure: Service, ServiceMonitor, NetworkPolicy */ -}}
{{- if and $v.serviceMonitor.enabled (not (include "kube-extender.exposed" .)) -}}
{{- fail (printf "serviceMonitor.enabled=true but the sidecar listens on %s only, where Prometheus cannot reach /metrics: set scheduler.extenderListenAddress=0.0.0.0 (the chart then adds a Service)" $v.scheduler.extenderListenAddress) -}}
{{- end -}}
{{- if $v.networkPolicy.enabled -}}
{{- if and (not $second) (not $v.networkPolicy.schedulerFrom) -}}
{{- fail "networkPolicy.enabled=true in standalone mode needs networkPolicy.schedulerFrom, or kube-scheduler cannot call the extender; a control-plane kube-scheduler uses the host network, so list the control-plane nodes as ipBlock peers" -}}
{{- end -}}
{{- if and $v.serviceMonitor.enabled (not $v.networkPolicy.metricsFrom) -}}
{{- fail "networkPolicy.enabled=true with serviceMonitor.enabled=true needs networkPolicy.metricsFrom (Prometheus's pods), or the scrapes are dropped" -}}
{{- end -}}
{{- end -}}

{{- /* disruption budget */ -}}
{{- $pdb := $v.podDisruptionBudget -}}
{{- if $pdb.enabled -}}
{{- $min := toString $pdb.minAvailable -}}
{{- $max := toString $pdb.maxUnavailable -}}
{{- if and (ne $min "") (ne $max "") -}}
{{- fail "podDisruptionBudget: set minAvailable or maxUnavailable, not both" -}}
{{- end -}}
{{- if and (eq $min "") (eq $max "") -}}
{{- fail "podDisruptionBudget.enabled=true needs minAvailable or maxUnavailable" -}}
{{- end -}}
{{- if and (ne $min "") (not (hasSuffix "%" $min)) (ge (int $min) $replicas) -}}
{{- fail (printf "podDisruptionBudget.minAvailable=%s with replicaCount=%d forbids every eviction: node drains would hang. Lower it or use maxUnavailable" $min $replicas) -}}
{{- end -}}
{{- end -}}
{{- end -}}
