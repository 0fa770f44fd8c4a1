// Package member is hetflow's membership: one memberlist (SWIM gossip) ring
// for coordinators and nodes, with each member's metadata (proto.Meta: role,
// raft and HTTP addresses, CPUs, GPUs) and its state as this process sees it.
//
// In order:
//
//	l, err := member.New(member.Config{ID: "n1", BindAddr: "0.0.0.0:7946",
//		Advertise: "10.0.0.5", Join: []string{"c1:7946", "c2:7946"},
//		Meta: proto.Meta{Role: proto.RoleNode, ID: "n1", CPUs: 8},
//		SecretKey: secret.GossipKey, OnEvent: func(ev member.Event) { ... }})
//	err = l.Start(ctx)        // joins any seed, retrying until ctx ends (ErrJoin)
//	ms := l.Members()         // alive, suspect, dead and left members, by id
//	err = l.UpdateMeta(meta)  // gossip new metadata
//	err = l.Leave(time.Second) // others see "left", not "dead"
//	err = l.Shutdown()        // joins the goroutines
//
// Timing: Tuned() (ProbeInterval 200ms, ProbeTimeout 100ms, SuspicionMult 2,
// GossipInterval 50ms) detects a crashed member in about one second on a LAN.
// memberlist itself reports only alive and dead-or-left; this package tells
// the two apart with a message the leaving member sends before memberlist's
// leave, and calls a member suspect when memberlist still holds it alive but
// its direct probes have gone unanswered for two probe rounds.
// While some member is dead, the seeds are joined again every Config.Rejoin,
// so the halves of a healed partition merge.
//
// Events (join, update, leave, fail) reach Config.OnEvent one at a time, in
// order, on a goroutine of the List. With a SecretKey (16, 24 or 32 bytes;
// proto.Secret.GossipKey) gossip is encrypted and a member without the key
// cannot join.
package member
