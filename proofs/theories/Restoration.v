(** * T5: restoring transformations, THEORY.md sections 3 and 4b ("DFPO").

    Each acts on the per-response weights [w_i] (under stop-gradient, so they are
    constants here) before differentiation. *)

From Coq Require Import QArith Lqa Qfield Lia Qminmax.
From Exchange Require Import Sums Cancellation.
Open Scope Q_scope.

(** Group minimum of the weights [min_{i < G} w_i] ([0] for an empty group). *)
Fixpoint gmin (G : nat) (w : nat -> Q) : Q :=
  match G with
  | O => 0
  | S O => w O
  | S k => Qmin (gmin k w) (w k)
  end.

(** [gmin] is a lower bound of the group's weights (so it is the minimum it claims). *)
Lemma gmin_le : forall G w i, (i < G)%nat -> gmin G w <= w i.
Proof.
  induction G as [|k IH]; intros w i Hi; [lia|].
  destruct k as [|k'].
  - simpl. assert (i = O) by lia. subst. lra.
  - change (gmin (S (S k')) w) with (Qmin (gmin (S k') w) (w (S k'))).
    destruct (Nat.eq_dec i (S k')) as [->|Hne].
    + apply Q.le_min_r.
    + eapply Qle_trans; [apply Q.le_min_l | apply IH; lia].
Qed.

(** Min-Replace: every weight replaced by the group minimum is one constant per group,
    so zero-sum advantages cancel (by T1). *)
Theorem T5_min_replace : forall G (A w : nat -> Q),
  sum G A == 0 -> K G A (fun _ => gmin G w) == 0.
Proof.
  intros G A w HZ. apply (T1_sufficiency G A _ (gmin G w)). split; [exact HZ | intros; reflexivity].
Qed.

(** A constant normaliser per group (Dr. GRPO's constant, DAPO's group token count,
    a global budget) restores cancellation. *)
Theorem T5_constant_normaliser : forall G (A : nat -> Q) (C : Q),
  sum G A == 0 -> K G A (fun _ => / C) == 0.
Proof.
  intros G A C HZ. apply (T1_sufficiency G A _ (/ C)). split; [exact HZ | intros; reflexivity].
Qed.

(** Adv-Orthogonal weights [w' = w - (A.w / A.A) A]. *)
Definition orth (G : nat) (A w : nat -> Q) (i : nat) : Q :=
  w i - (K G A w / K G A A) * A i.

(** Adv-Orthogonal cancels for the group's own advantages whenever [A <> 0] (it does
    not make the weights equal, so it restores (C), not (E)). *)
Theorem T5_adv_orthogonal : forall G (A w : nat -> Q),
  (exists j, (j < G)%nat /\ ~ A j == 0) -> K G A (orth G A w) == 0.
Proof.
  intros G A w HA. pose proof (sum_squares_pos G A HA) as Hpos.
  unfold K at 1, orth.
  rewrite (sum_ext G _ (fun i => A i * w i - (K G A w / K G A A) * (A i * A i)))
    by (intros; ring).
  rewrite sum_minus, sum_scale.
  fold (K G A w). change (sum G (fun i => A i * A i)) with (K G A A).
  unfold K in *. field. lra.
Qed.

(** A sign-free weight, any function [h] of the event's ratio alone (not of the
    advantage's sign), is shared by all occurrences and cancels. *)
Theorem T5_sign_free_weight : forall G (A : nat -> Q) (h : Q -> Q) (rho : Q),
  sum G A == 0 -> K G A (fun _ => h rho) == 0.
Proof.
  intros G A h rho HZ. apply (T1_sufficiency G A _ (h rho)). split; [exact HZ | intros; reflexivity].
Qed.

(** CISPO-style truncated weight [min(rho, 1 + eps)], an instance of the above. *)
Theorem T5_truncated_ratio : forall G (A : nat -> Q) (rho eps : Q),
  sum G A == 0 -> K G A (fun _ => Qmin rho (1 + eps)) == 0.
Proof.
  intros G A rho eps HZ. apply (T5_sign_free_weight G A (fun x => Qmin x (1 + eps)) rho HZ).
Qed.

(** ** The transformations as defined in THEORY.md 4b, for any group and any weights *)

(** [gmin] is attained: it is one of the group's weights (for a non-empty group). *)
Lemma gmin_attained : forall G w, (0 < G)%nat -> exists k, (k < G)%nat /\ gmin G w == w k.
Proof.
  induction G as [|k IH]; intros w HG; [lia|].
  destruct k as [|k'].
  - exists O. split; [lia|reflexivity].
  - change (gmin (S (S k')) w) with (Qmin (gmin (S k') w) (w (S k'))).
    destruct (IH w ltac:(lia)) as [j [Hj Hm]].
    destruct (Q.min_spec (gmin (S k') w) (w (S k'))) as [[_ E]|[_ E]].
    + exists j. split; [lia|]. rewrite E. exact Hm.
    + exists (S k'). split; [lia|]. rewrite E. reflexivity.
Qed.

(** Min-Replace [w_i <- min_j w_j] for every [i]. *)
Definition min_replace (G : nat) (w : nat -> Q) (i : nat) : Q := gmin G w.

(** Min-Replace maps any weights to equal ones, each the group's minimum weight (a
    lower bound attained by some response), so (E) holds and zero-sum advantages
    cancel. *)
Theorem T5_min_replace_general : forall G (w : nat -> Q), (0 < G)%nat ->
  (forall i j, (i < G)%nat -> (j < G)%nat -> min_replace G w i == min_replace G w j) /\
  (forall i j, (i < G)%nat -> (j < G)%nat -> min_replace G w i <= w j) /\
  (exists k, (k < G)%nat /\ forall i, min_replace G w i == w k) /\
  (forall A, sum G A == 0 -> K G A (min_replace G w) == 0).
Proof.
  intros G w HG. split; [|split; [|split]].
  - intros. reflexivity.
  - intros i j _ Hj. apply gmin_le, Hj.
  - destruct (gmin_attained G w HG) as [k [Hk Hm]]. exists k. split; [exact Hk|].
    intros i. exact Hm.
  - intros A HZ. apply (T1_sufficiency G A _ (gmin G w)). split; [exact HZ | intros; reflexivity].
Qed.

(** Adv-Orthogonal is the orthogonal projection along [A]: the result is orthogonal to
    [A] and differs from [w] by a multiple of [A]. *)
Theorem T5_adv_orthogonal_projection : forall G (A w : nat -> Q),
  (exists j, (j < G)%nat /\ ~ A j == 0) ->
  K G A (orth G A w) == 0 /\
  exists t, forall i, w i - orth G A w i == t * A i.
Proof.
  intros G A w HA. split.
  - apply T5_adv_orthogonal, HA.
  - exists (K G A w / K G A A). intros i. unfold orth. ring.
Qed.

(** A clip decision that is a function of the event alone (here of its ratio [rho],
    shared by every occurrence), with any event weight [h rho]: the coefficient
    [if clip rho then 0 else A_i * h rho] cancels for zero-sum advantages, whatever the
    decision rule.  PPO's sign-dependent clip (T4) is not of this form. *)
Theorem T5_event_clip : forall G (A : nat -> Q) (clip : Q -> bool) (h : Q -> Q) (rho : Q),
  sum G A == 0 -> sum G (fun i => if clip rho then 0 else A i * h rho) == 0.
Proof.
  intros G A clip h rho HZ. destruct (clip rho).
  - apply sum_zero. intros; reflexivity.
  - rewrite sum_scale_r, HZ. ring.
Qed.

(** Adv-Orthogonal restores (C), not (E): on Cor 3.3's group the weights [(1, 3, 2)]
    already cancel, so the projection leaves them as they are, unequal. *)
Theorem T5_adv_orthogonal_unequal :
  (exists j, (j < 3)%nat /\ ~ cor33_A j == 0) /\
  K 3 cor33_A (orth 3 cor33_A cor33_w) == 0 /\
  ~ orth 3 cor33_A cor33_w 0%nat == orth 3 cor33_A cor33_w 1%nat.
Proof.
  split; [|split].
  - exists O. split; [lia|]. vm_compute. discriminate.
  - vm_compute. reflexivity.
  - vm_compute. discriminate.
Qed.
