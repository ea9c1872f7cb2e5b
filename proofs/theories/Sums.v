(** * Finite sums over a group of responses [0 .. G-1].

    A group is a function [nat -> Q] read on the indices [i < G]; every theorem in
    this development quantifies over an arbitrary group size [G] (THEORY.md, section 1).
    Rationals (QArith) rather than Reals keep every proof free of axioms:
    [Print Assumptions] answers "Closed under the global context". *)

From Coq Require Import QArith Lqa Qfield Lia.
Open Scope Q_scope.

(** [uncurried] (hypotheses as one conjunction, as the record states them), for every
    module that imports this one. *)
From Exchange Require Export Uncurry.

(** [sum n f = f 0 + ... + f (n-1)]. *)
Fixpoint sum (n : nat) (f : nat -> Q) : Q :=
  match n with
  | O => 0
  | S k => sum k f + f k
  end.

(** The group size as a rational. *)
Definition QG (n : nat) : Q := inject_Z (Z.of_nat n).

(** Group mean [ (1/G) sum_i f i ]. *)
Definition mean (n : nat) (f : nat -> Q) : Q := sum n f / QG n.

(** Indicator of response [j]: the binary reward vector [e_j]. *)
Definition ind (j i : nat) : Q := if Nat.eqb i j then 1 else 0.

Lemma QG_S : forall n, QG (S n) == QG n + 1.
Proof.
  intro n; unfold QG. rewrite Nat2Z.inj_succ, <- Z.add_1_r, inject_Z_plus.
  reflexivity.
Qed.

Lemma QG_pos : forall n, (0 < n)%nat -> 0 < QG n.
Proof.
  intros n Hn; unfold QG, Qlt; simpl. lia.
Qed.

Lemma QG_nonzero : forall n, (0 < n)%nat -> ~ QG n == 0.
Proof.
  intros n Hn H. pose proof (QG_pos n Hn). lra.
Qed.

Lemma sum_ext : forall n f g,
  (forall i, (i < n)%nat -> f i == g i) -> sum n f == sum n g.
Proof.
  induction n as [|k IH]; intros f g H; simpl.
  - reflexivity.
  - rewrite (IH f g) by (intros; apply H; lia). rewrite (H k) by lia. reflexivity.
Qed.

Lemma sum_zero : forall n f, (forall i, (i < n)%nat -> f i == 0) -> sum n f == 0.
Proof.
  induction n as [|k IH]; intros f H; simpl.
  - reflexivity.
  - rewrite IH by (intros; apply H; lia). rewrite (H k) by lia. reflexivity.
Qed.

Lemma sum_plus : forall n f g, sum n (fun i => f i + g i) == sum n f + sum n g.
Proof.
  induction n as [|k IH]; intros f g; simpl.
  - reflexivity.
  - rewrite IH. ring.
Qed.

Lemma sum_minus : forall n f g, sum n (fun i => f i - g i) == sum n f - sum n g.
Proof.
  induction n as [|k IH]; intros f g; simpl.
  - reflexivity.
  - rewrite IH. ring.
Qed.

Lemma sum_scale : forall n c f, sum n (fun i => c * f i) == c * sum n f.
Proof.
  induction n as [|k IH]; intros c f; simpl.
  - ring.
  - rewrite IH. ring.
Qed.

Lemma sum_scale_r : forall n c f, sum n (fun i => f i * c) == sum n f * c.
Proof.
  intros n c f. rewrite (sum_ext n _ (fun i => c * f i)) by (intros; ring).
  rewrite sum_scale. ring.
Qed.

Lemma sum_const : forall n c, sum n (fun _ => c) == QG n * c.
Proof.
  induction n as [|k IH]; intro c; simpl.
  - unfold QG; simpl. ring.
  - rewrite IH, QG_S. ring.
Qed.

(** Picking out one response: [sum_i e_j(i) * f i = f j]. *)
Lemma sum_ind : forall n j f, (j < n)%nat -> sum n (fun i => ind j i * f i) == f j.
Proof.
  induction n as [|k IH]; intros j f Hj; simpl; [lia|].
  unfold ind at 2. destruct (Nat.eqb k j) eqn:E.
  - apply Nat.eqb_eq in E; subst j.
    rewrite sum_zero. { ring. }
    intros i Hi. unfold ind. destruct (Nat.eqb_spec i k); [lia|]. ring.
  - apply Nat.eqb_neq in E. rewrite IH by lia. ring.
Qed.

Lemma sum_ind_one : forall n j, (j < n)%nat -> sum n (ind j) == 1.
Proof.
  intros n j Hj. rewrite (sum_ext n _ (fun i => ind j i * (fun _ => 1) i)) by (intros; simpl; ring).
  apply (sum_ind n j (fun _ => 1) Hj).
Qed.

(** Mean of a constant group (non-empty). *)
Lemma mean_const : forall n c, (0 < n)%nat -> mean n (fun _ => c) == c.
Proof.
  intros n c Hn. unfold mean. rewrite sum_const. field. apply QG_nonzero; exact Hn.
Qed.

(** Centring makes any group zero-sum: [sum_i (f i - mean f) = 0]. *)
Lemma sum_centred : forall n f, sum n (fun i => f i - mean n f) == 0.
Proof.
  intros n f. rewrite sum_minus, sum_const. destruct n as [|k].
  - simpl. unfold QG; simpl. ring.
  - unfold mean. field. apply QG_nonzero; lia.
Qed.

(** Sign lemmas for sums. *)
Lemma sum_nonpos : forall n f, (forall i, (i < n)%nat -> f i <= 0) -> sum n f <= 0.
Proof.
  induction n as [|k IH]; intros f H; simpl.
  - lra.
  - pose proof (IH f (fun i Hi => H i ltac:(lia))). pose proof (H k ltac:(lia)). lra.
Qed.

Lemma sum_neg : forall n f,
  (forall i, (i < n)%nat -> f i <= 0) ->
  (exists j, (j < n)%nat /\ f j < 0) -> sum n f < 0.
Proof.
  induction n as [|k IH]; intros f H [j [Hj Hf]]; simpl; [lia|].
  destruct (Nat.eq_dec j k) as [->|Hne].
  - pose proof (sum_nonpos k f (fun i Hi => H i ltac:(lia))). lra.
  - assert (sum k f < 0) by (apply IH; [intros; apply H; lia | exists j; split; [lia|exact Hf]]).
    pose proof (H k ltac:(lia)). lra.
Qed.

Lemma sum_pos : forall n f,
  (forall i, (i < n)%nat -> 0 <= f i) ->
  (exists j, (j < n)%nat /\ 0 < f j) -> 0 < sum n f.
Proof.
  intros n f H [j [Hj Hf]].
  assert (sum n (fun i => - f i) < 0).
  { apply sum_neg. - intros i Hi. pose proof (H i Hi). lra.
    - exists j. split; [exact Hj | lra]. }
  rewrite (sum_ext n _ (fun i => -1 * f i)) in H0 by (intros; ring).
  rewrite sum_scale in H0. lra.
Qed.

(** A non-zero group has a positive squared norm [A.A > 0]. *)
Lemma sum_squares_pos : forall n A,
  (exists j, (j < n)%nat /\ ~ A j == 0) -> 0 < sum n (fun i => A i * A i).
Proof.
  intros n A [j [Hj Ha]]. apply sum_pos.
  - intros i _. nra.
  - exists j. split; [exact Hj | nra].
Qed.
