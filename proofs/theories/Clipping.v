(** * T4: sign-dependent (asymmetric) clipping, mechanism M2, THEORY.md section 3.

    In the PPO-clip surrogate the coefficient of an occurrence is
    [A_i * rho * 1[not clipped]], and the clip test depends on the sign of [A_i]:
    clipped iff [A_i > 0 /\ rho > 1 + eps_high] or [A_i < 0 /\ rho < 1 - eps_low].
    The ratio [rho] is the same for every occurrence of an event, so outside the trust
    region only one sign of advantage survives. *)

From Coq Require Import QArith Lqa Qfield Lia Bool.
From Exchange Require Import Sums Cancellation.
Open Scope Q_scope.

(** Decidable strict order on Q (computational, so no axiom is used). *)
Definition qltb (x y : Q) : bool := negb (Qle_bool y x).

Lemma qltb_spec : forall x y, qltb x y = true <-> x < y.
Proof.
  intros x y. unfold qltb. rewrite negb_true_iff. split; intro H.
  - apply Qnot_le_lt. intro Hle. apply Qle_bool_iff in Hle. congruence.
  - destruct (Qle_bool y x) eqn:E; [|reflexivity].
    apply Qle_bool_iff in E. lra.
Qed.

Lemma qltb_false : forall x y, qltb x y = false <-> y <= x.
Proof.
  intros x y. unfold qltb. rewrite negb_false_iff. apply Qle_bool_iff.
Qed.

(** The PPO clip test for advantage [a] at ratio [rho]. *)
Definition clipped (eps_low eps_high rho a : Q) : bool :=
  (qltb 0 a && qltb (1 + eps_high) rho) || (qltb a 0 && qltb rho (1 - eps_low)).

(** PPO-clip token coefficient [a * rho * 1[not clipped]]. *)
Definition clip_coef (eps_low eps_high rho a : Q) : Q :=
  if clipped eps_low eps_high rho a then 0 else a * rho.

(** Negative and positive parts: [min(a, 0)] and [max(a, 0)]. *)
Definition neg_part (a : Q) : Q := if qltb a 0 then a else 0.
Definition pos_part (a : Q) : Q := if qltb 0 a then a else 0.

Ltac qcase x y := let E := fresh "E" in
  destruct (qltb x y) eqn:E; [apply qltb_spec in E | apply qltb_false in E].

(** Above the trust region ([rho > 1 + eps_high]) only the negative advantages keep
    their coefficient: [K = rho * sum_i min(A_i, 0)]. *)
Theorem T4_above_event_coefficient : forall G (A : nat -> Q) (eps_low eps_high rho : Q),
  0 <= eps_low /\
  0 <= eps_high /\
  1 + eps_high < rho ->
  sum G (fun i => clip_coef eps_low eps_high rho (A i)) == rho * sum G (fun i => neg_part (A i)).
Proof.
  uncurried.
  intros G A el eh rho Hl Hh Hr. rewrite <- sum_scale. apply sum_ext. intros i _.
  unfold clip_coef, clipped, neg_part.
  qcase 0 (A i); qcase (1 + eh) rho; qcase (A i) 0; qcase rho (1 - el);
    simpl; try lra; nra.
Qed.

(** ... hence [K < 0] as soon as one advantage in the group is negative: a shared event
    above the trust region is pushed down whatever its credit. *)
Theorem T4_above_negative : forall G (A : nat -> Q) (eps_low eps_high rho : Q),
  0 <= eps_low /\
  0 <= eps_high /\
  1 + eps_high < rho /\
  (exists j, (j < G)%nat /\ A j < 0) ->
  sum G (fun i => clip_coef eps_low eps_high rho (A i)) < 0.
Proof.
  uncurried.
  intros G A el eh rho Hl Hh Hr [j [Hj Hneg]].
  rewrite T4_above_event_coefficient by (repeat split; assumption).
  assert (Hs : sum G (fun i => neg_part (A i)) < 0).
  { apply sum_neg.
    - intros i _. unfold neg_part. qcase (A i) 0; lra.
    - exists j. split; [exact Hj|]. unfold neg_part. qcase (A j) 0; lra. }
  assert (0 < rho) by lra. nra.
Qed.

(** Below the trust region ([0 < rho < 1 - eps_low]) only the positive advantages keep
    their coefficient: [K = rho * sum_i max(A_i, 0)]. *)
Theorem T4_below_event_coefficient : forall G (A : nat -> Q) (eps_low eps_high rho : Q),
  0 <= eps_low /\
  0 <= eps_high /\
  rho < 1 - eps_low ->
  sum G (fun i => clip_coef eps_low eps_high rho (A i)) == rho * sum G (fun i => pos_part (A i)).
Proof.
  uncurried.
  intros G A el eh rho Hl Hh Hr. rewrite <- sum_scale. apply sum_ext. intros i _.
  unfold clip_coef, clipped, pos_part.
  qcase 0 (A i); qcase (1 + eh) rho; qcase (A i) 0; qcase rho (1 - el);
    simpl; try lra; nra.
Qed.

(** ... hence [K > 0] as soon as one advantage is positive. *)
Theorem T4_below_positive : forall G (A : nat -> Q) (eps_low eps_high rho : Q),
  0 <= eps_low /\
  0 <= eps_high /\
  0 < rho /\
  rho < 1 - eps_low /\
  (exists j, (j < G)%nat /\ 0 < A j) ->
  0 < sum G (fun i => clip_coef eps_low eps_high rho (A i)).
Proof.
  uncurried.
  intros G A el eh rho Hl Hh Hp Hr [j [Hj Hpos]].
  rewrite T4_below_event_coefficient by (repeat split; assumption).
  assert (Hs : 0 < sum G (fun i => pos_part (A i))).
  { apply sum_pos.
    - intros i _. unfold pos_part. qcase 0 (A i); lra.
    - exists j. split; [exact Hj|]. unfold pos_part. qcase 0 (A j); lra. }
  nra.
Qed.

(** Inside the trust region nothing is clipped and zero-sum advantages cancel (T1):
    it is the sign-dependent clip alone that breaks cancellation. *)
Theorem T4_inside_cancels : forall G (A : nat -> Q) (eps_low eps_high rho : Q),
  1 - eps_low <= rho /\
  rho <= 1 + eps_high /\
  sum G A == 0 ->
  sum G (fun i => clip_coef eps_low eps_high rho (A i)) == 0.
Proof.
  uncurried.
  intros G A el eh rho Hl Hh HZ.
  rewrite (sum_ext G _ (fun i => A i * rho)).
  - rewrite sum_scale_r, HZ. ring.
  - intros i _. unfold clip_coef, clipped.
    qcase 0 (A i); qcase (1 + eh) rho; qcase (A i) 0; qcase rho (1 - el);
      simpl; try lra; reflexivity.
Qed.

(** ** The dual clip (arXiv:1912.09729), as the package's [ppo] (verl's "vanilla")

    For a negative advantage the surrogate is floored at [c * A]: above [rho > c] its
    coefficient is zero too.  [T4_above_negative] therefore holds for the package's PPO
    only up to [c]; above [c] every coefficient of the event is zero. *)
Definition dual_clip_coef (c eps_low eps_high rho a : Q) : Q :=
  if qltb a 0 && qltb c rho then 0 else clip_coef eps_low eps_high rho a.

(** Up to [c] the dual clip changes nothing. *)
Theorem T4_dual_agrees_up_to_c : forall (c eps_low eps_high rho a : Q),
  rho <= c -> dual_clip_coef c eps_low eps_high rho a == clip_coef eps_low eps_high rho a.
Proof.
  intros c el eh rho a Hc. unfold dual_clip_coef.
  destruct (qltb c rho) eqn:E.
  - apply qltb_spec in E. lra.
  - rewrite andb_false_r. reflexivity.
Qed.

(** Between [1 + eps_high] and [c]: the dual-clipped PPO pushes the shared event down
    ([K < 0]) as soon as one advantage is negative, as [T4_above_negative] says. *)
Theorem T4_dual_above_negative : forall G (A : nat -> Q) (c eps_low eps_high rho : Q),
  0 <= eps_low /\
  0 <= eps_high /\
  1 + eps_high < rho /\
  rho <= c /\
  (exists j, (j < G)%nat /\ A j < 0) ->
  sum G (fun i => dual_clip_coef c eps_low eps_high rho (A i)) < 0.
Proof.
  uncurried.
  intros G A c el eh rho Hl Hh Hr Hc Hj.
  rewrite (sum_ext G _ (fun i => clip_coef el eh rho (A i)))
    by (intros; apply T4_dual_agrees_up_to_c; exact Hc).
  apply T4_above_negative; repeat split; assumption.
Qed.

(** Above [c] (with [c >= 1 + eps_high]) every coefficient is zero: [K = 0] whatever
    the advantages; [T4_above_negative] stops at [c]. *)
Theorem T4_dual_above_c : forall G (A : nat -> Q) (c eps_low eps_high rho : Q),
  1 + eps_high <= c /\
  c < rho ->
  forall i, (i < G)%nat -> dual_clip_coef c eps_low eps_high rho (A i) == 0.
Proof.
  uncurried.
  intros G A c el eh rho Hc Hr i _. unfold dual_clip_coef, clip_coef, clipped.
  qcase (A i) 0; qcase c rho; qcase 0 (A i); qcase (1 + eh) rho; qcase rho (1 - el);
    simpl; try lra; try reflexivity;
    assert (Ha : A i == 0) by lra; rewrite Ha; ring.
Qed.
