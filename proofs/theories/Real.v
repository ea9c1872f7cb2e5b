(** * T1, T2, T3, T4, M1 and Cor 3.3 over the real numbers (Coq's standard [Reals]).

    The rational development ([Sums], [Cancellation], ...) is axiom-free but cannot
    speak of the std (a square root) or of GSPO's exponential weights, and in [Q]
    [x / 0 = 0].  Here groups are functions [nat -> R] read on [i < G]; every division
    by a group constant carries the hypothesis that it is positive, and only where the
    proof needs it.  [Print Assumptions] lists the standard axioms of [Reals] (see the
    allow-list in [exchange.theory.coq]). *)

From Coq Require Import Reals Lra Lia.
Open Scope R_scope.

From Exchange Require Import Uncurry.

Fixpoint Rsum (n : nat) (f : nat -> R) : R :=
  match n with O => 0 | S k => Rsum k f + f k end.

Definition Rmean (n : nat) (f : nat -> R) : R := Rsum n f / INR n.
Definition Rind (j i : nat) : R := if Nat.eqb i j then 1 else 0.

(** Event coefficient [K = sum_i A_i w_i]; group-mean advantages divided by [s]; the
    (population) standard deviation of the rewards, with [sqrt]. *)
Definition RK (G : nat) (A w : nat -> R) : R := Rsum G (fun i => A i * w i).
Definition Radv (G : nat) (s : R) (r : nat -> R) (i : nat) : R := (r i - Rmean G r) / s.
Definition Rstd (G : nat) (r : nat -> R) : R :=
  sqrt (Rmean G (fun i => (r i - Rmean G r) * (r i - Rmean G r))).

Lemma Rsum_ext : forall n f g, (forall i, (i < n)%nat -> f i = g i) -> Rsum n f = Rsum n g.
Proof.
  induction n as [|k IH]; intros f g H; simpl; [reflexivity|].
  rewrite (IH f g) by (intros; apply H; lia). rewrite (H k) by lia. reflexivity.
Qed.

Lemma Rsum_minus : forall n f g, Rsum n (fun i => f i - g i) = Rsum n f - Rsum n g.
Proof. induction n as [|k IH]; intros; simpl; [ring|rewrite IH; ring]. Qed.

Lemma Rsum_plus : forall n f g, Rsum n (fun i => f i + g i) = Rsum n f + Rsum n g.
Proof. induction n as [|k IH]; intros; simpl; [ring|rewrite IH; ring]. Qed.

Lemma Rsum_scale : forall n c f, Rsum n (fun i => c * f i) = c * Rsum n f.
Proof. induction n as [|k IH]; intros; simpl; [ring|rewrite IH; ring]. Qed.

Lemma Rsum_const : forall n c, Rsum n (fun _ => c) = INR n * c.
Proof.
  induction n as [|k IH]; intros; simpl Rsum; [simpl; ring|].
  rewrite IH, S_INR. ring.
Qed.

Lemma Rsum_zero : forall n f, (forall i, (i < n)%nat -> f i = 0) -> Rsum n f = 0.
Proof.
  intros n f H. rewrite (Rsum_ext n f (fun _ => 0)) by exact H.
  rewrite Rsum_const. ring.
Qed.

Lemma Rsum_ind : forall n j f, (j < n)%nat -> Rsum n (fun i => Rind j i * f i) = f j.
Proof.
  induction n as [|k IH]; intros j f Hj; simpl; [lia|].
  unfold Rind at 2. destruct (Nat.eqb k j) eqn:E.
  - apply Nat.eqb_eq in E; subst j. rewrite Rsum_zero. { ring. }
    intros i Hi. unfold Rind. destruct (Nat.eqb_spec i k); [lia|]. ring.
  - apply Nat.eqb_neq in E. rewrite IH by lia. ring.
Qed.

Lemma Rsum_ind_one : forall n j, (j < n)%nat -> Rsum n (Rind j) = 1.
Proof.
  intros n j Hj. rewrite (Rsum_ext n _ (fun i => Rind j i * 1)) by (intros; ring).
  apply (Rsum_ind n j (fun _ => 1) Hj).
Qed.

Lemma INR_pos : forall n, (0 < n)%nat -> 0 < INR n.
Proof. intros n Hn. apply lt_0_INR. exact Hn. Qed.

Lemma Rsum_centred : forall n f, Rsum n (fun i => f i - Rmean n f) = 0.
Proof.
  intros n f. rewrite Rsum_minus, Rsum_const. destruct n as [|k].
  - simpl. ring.
  - unfold Rmean. field. apply Rgt_not_eq, INR_pos. lia.
Qed.

Lemma Rsum_nonneg : forall n f, (forall i, (i < n)%nat -> 0 <= f i) -> 0 <= Rsum n f.
Proof.
  induction n as [|k IH]; intros f H; simpl; [lra|].
  pose proof (IH f (fun i Hi => H i ltac:(lia))). pose proof (H k ltac:(lia)). lra.
Qed.

Lemma Rsum_pos : forall n f, (forall i, (i < n)%nat -> 0 <= f i) ->
  forall j, (j < n)%nat -> 0 < f j -> 0 < Rsum n f.
Proof.
  induction n as [|k IH]; intros f H j Hj Hf; simpl; [lia|].
  destruct (Nat.eq_dec j k) as [->|Hne].
  - pose proof (Rsum_nonneg k f (fun i Hi => H i ltac:(lia))). lra.
  - pose proof (IH f (fun i Hi => H i ltac:(lia)) j ltac:(lia) Hf).
    pose proof (H k ltac:(lia)). lra.
Qed.

(** Group-mean advantages are zero-sum for any scale. *)
Lemma Radv_zero_sum : forall G s r, Rsum G (Radv G s r) = 0.
Proof.
  intros. unfold Radv, Rdiv.
  rewrite (Rsum_ext G _ (fun i => / s * (r i - Rmean G r))) by (intros; ring).
  rewrite Rsum_scale, Rsum_centred. ring.
Qed.

Lemma RK_adv : forall G s r w,
  RK G (Radv G s r) w = / s * Rsum G (fun i => (r i - Rmean G r) * w i).
Proof.
  intros. unfold RK, Radv, Rdiv. rewrite <- Rsum_scale. apply Rsum_ext; intros; ring.
Qed.

Lemma Rmean_ind : forall G j, (j < G)%nat -> Rmean G (Rind j) = / INR G.
Proof. intros. unfold Rmean. rewrite Rsum_ind_one by assumption. unfold Rdiv. ring. Qed.

(** The one-hot computation: [sum_i (e_j(i) - 1/G) w_i = w_j - mean w]. *)
Lemma Rsum_onehot : forall G j w, (j < G)%nat ->
  Rsum G (fun i => (Rind j i - Rmean G (Rind j)) * w i) = w j - Rmean G w.
Proof.
  intros G j w Hj.
  rewrite (Rsum_ext G _ (fun i => Rind j i * w i - Rmean G (Rind j) * w i)) by (intros; ring).
  rewrite Rsum_minus, Rsum_ind, Rsum_scale, Rmean_ind by exact Hj.
  unfold Rmean, Rdiv. ring.
Qed.

(** ** T1 over R *)
Theorem R_T1_sufficiency : forall G (A w : nat -> R) (w0 : R),
  Rsum G A = 0 /\
  (forall i, (i < G)%nat -> w i = w0) ->
  RK G A w = 0.
Proof.
  uncurried.
  intros G A w w0 HZ Hw. unfold RK.
  rewrite (Rsum_ext G _ (fun i => w0 * A i)) by (intros i Hi; rewrite (Hw i Hi); ring).
  rewrite Rsum_scale, HZ. ring.
Qed.

(** ** T2 over R: the hypotheses are only about the one-hot reward vectors [e_j], with
    the advantages divided by any group constant [sigma] that is positive on them. *)
Theorem R_T2_necessity_onehot : forall (G : nat) (w : nat -> R) (sigma : (nat -> R) -> R),
  (forall j, (j < G)%nat -> 0 < sigma (Rind j)) /\
  (forall j, (j < G)%nat -> RK G (Radv G (sigma (Rind j)) (Rind j)) w = 0) ->
  forall i j, (i < G)%nat -> (j < G)%nat -> w i = w j.
Proof.
  uncurried.
  intros G w sigma Hpos HC.
  assert (Hm : forall j, (j < G)%nat -> w j = Rmean G w).
  { intros j Hj. pose proof (HC j Hj) as HK. pose proof (Hpos j Hj) as Hs.
    rewrite RK_adv, Rsum_onehot in HK by exact Hj.
    apply Rmult_integral in HK. destruct HK as [HK|HK]; [|lra].
    exfalso. apply (Rinv_neq_0_compat (sigma (Rind j))); [lra|exact HK]. }
  intros i j Hi Hj. rewrite (Hm i Hi), (Hm j Hj). reflexivity.
Qed.

(** A one-hot reward vector of a group of [G >= 2] is not constant. *)
Lemma Rind_nonconstant : forall G j, (2 <= G)%nat -> (j < G)%nat ->
  exists a b, (a < G)%nat /\ (b < G)%nat /\ Rind j a <> Rind j b.
Proof.
  intros G j HG Hj. destruct j as [|j'].
  - exists O, 1%nat. split; [lia|split; [lia|]]. unfold Rind; simpl. intro H; lra.
  - exists (S j'), O. split; [exact Hj|split; [lia|]]. unfold Rind.
    rewrite Nat.eqb_refl. simpl. intro H; lra.
Qed.

(** T2 over real reward vectors: if [K = 0] for every non-constant real reward vector,
    the advantages divided by any group constant [sigma] positive on those vectors (the
    std is), the weights are equal.  Only the one-hot vectors are needed. *)
Theorem R_T2_necessity_reals : forall (G : nat) (w : nat -> R) (sigma : (nat -> R) -> R),
  (2 <= G)%nat /\
  (forall r, (exists a b, (a < G)%nat /\ (b < G)%nat /\ r a <> r b) -> 0 < sigma r) /\
  (forall r, (exists a b, (a < G)%nat /\ (b < G)%nat /\ r a <> r b) -> RK G (Radv G (sigma r) r) w = 0) ->
  forall i j, (i < G)%nat -> (j < G)%nat -> w i = w j.
Proof.
  uncurried.
  intros G w sigma HG Hpos HC.
  apply (R_T2_necessity_onehot G w sigma). split.
  - intros j Hj. apply Hpos, Rind_nonconstant; assumption.
  - intros j Hj. apply HC, Rind_nonconstant; assumption.
Qed.

(** The std is positive on every one-hot reward vector of a group of [G >= 2]. *)
Lemma R_std_onehot_pos : forall G j, (2 <= G)%nat -> (j < G)%nat -> 0 < Rstd G (Rind j).
Proof.
  intros G j HG Hj. unfold Rstd. apply sqrt_lt_R0. unfold Rmean at 1, Rdiv.
  apply Rmult_lt_0_compat; [|apply Rinv_0_lt_compat, INR_pos; lia].
  apply (Rsum_pos G _ (fun i _ => Rle_0_sqr _) j Hj).
  rewrite Rmean_ind by exact Hj. unfold Rind. rewrite Nat.eqb_refl.
  assert (HG' : 1 < INR G) by (apply lt_1_INR; lia).
  assert (0 < / INR G < 1).
  { split; [apply Rinv_0_lt_compat; lra|]. rewrite <- Rinv_1.
    apply Rinv_lt_contravar; lra. }
  apply Rmult_lt_0_compat; lra.
Qed.

(** T2 with GRPO's std normalisation: [K = 0] for every one-hot reward vector, the
    advantages divided by the std (with [sqrt]), forces equal weights. *)
Theorem R_T2_necessity_std : forall (G : nat) (w : nat -> R),
  (2 <= G)%nat /\
  (forall j, (j < G)%nat -> RK G (Radv G (Rstd G (Rind j)) (Rind j)) w = 0) ->
  forall i j, (i < G)%nat -> (j < G)%nat -> w i = w j.
Proof.
  uncurried.
  intros G w HG HC. apply (R_T2_necessity_onehot G w (Rstd G)); split; [|exact HC].
  intros j Hj. apply R_std_onehot_pos; assumption.
Qed.

(** Equal rewards: every coefficient vanishes only because the scale [s] is positive
    (in floating point the std is then 0 and [0/0] is NaN; in Q [x/0 = 0]). *)
Theorem R_null_on_equal_rewards : forall G s (r w : nat -> R) (r0 : R),
  0 < s /\
  (forall i, (i < G)%nat -> r i = r0) ->
  forall i, (i < G)%nat -> Radv G s r i * w i = 0.
Proof.
  uncurried.
  intros G s r w r0 Hs Hr i Hi. unfold Radv.
  assert (Hm : Rmean G r = r0).
  { unfold Rmean. rewrite (Rsum_ext G r (fun _ => r0)) by exact Hr. rewrite Rsum_const.
    field. apply Rgt_not_eq, INR_pos. lia. }
  rewrite Hm, (Hr i Hi). unfold Rdiv. ring.
Qed.

(** ** T3 over R: GRPO's per-sequence mean, weights [1/L_i]. *)
Theorem R_T3_one_correct : forall G (L : nat -> R) (c : nat), (c < G)%nat ->
  RK G (Radv G 1 (Rind c)) (fun i => / L i) = / L c - Rmean G (fun i => / L i).
Proof.
  intros G L c Hc. rewrite RK_adv, Rsum_onehot by exact Hc. rewrite Rinv_1. ring.
Qed.

Theorem R_T3_harmonic_mean : forall G (L : nat -> R) (c : nat),
  (c < G)%nat /\
  (forall i, (i < G)%nat -> 0 < L i) ->
  (0 < RK G (Radv G 1 (Rind c)) (fun i => / L i) <-> L c < / Rmean G (fun i => / L i)).
Proof.
  uncurried.
  intros G L c Hc HL. rewrite R_T3_one_correct by exact Hc.
  set (m := Rmean G (fun i => / L i)).
  assert (Hm : 0 < m).
  { unfold m, Rmean, Rdiv. apply Rmult_lt_0_compat.
    - apply (Rsum_pos G _ (fun i Hi => Rlt_le _ _ (Rinv_0_lt_compat _ (HL i Hi))) c Hc).
      apply Rinv_0_lt_compat, HL, Hc.
    - apply Rinv_0_lt_compat, INR_pos. lia. }
  pose proof (HL c Hc) as Hc'.
  split; intro H.
  - assert (m < / L c) by lra.
    rewrite <- (Rinv_inv (L c)). apply Rinv_lt_contravar; [|assumption].
    apply Rmult_lt_0_compat; [assumption|apply Rinv_0_lt_compat; assumption].
  - assert (/ / m < / L c) by (apply Rinv_lt_contravar; [apply Rmult_lt_0_compat;
      [assumption|apply Rinv_0_lt_compat; assumption] | assumption]).
    rewrite Rinv_inv in H0. lra.
Qed.

(** ** T4 over R: PPO-clip, the clip test depends on the sign of the advantage. *)
Definition R_clip_coef (eps_low eps_high rho a : R) : R :=
  if Rlt_dec 0 a then (if Rlt_dec (1 + eps_high) rho then 0 else a * rho)
  else if Rlt_dec a 0 then (if Rlt_dec rho (1 - eps_low) then 0 else a * rho)
  else a * rho.
Definition R_neg_part (a : R) : R := if Rlt_dec a 0 then a else 0.
Definition R_pos_part (a : R) : R := if Rlt_dec 0 a then a else 0.

Theorem R_T4_above_event_coefficient : forall G (A : nat -> R) (eps_low eps_high rho : R),
  0 <= eps_low /\
  0 <= eps_high /\
  1 + eps_high < rho ->
  Rsum G (fun i => R_clip_coef eps_low eps_high rho (A i)) = rho * Rsum G (fun i => R_neg_part (A i)).
Proof.
  uncurried.
  intros. rewrite <- Rsum_scale. apply Rsum_ext. intros i _.
  unfold R_clip_coef, R_neg_part.
  repeat destruct Rlt_dec; try lra; nra.
Qed.

Theorem R_T4_above_negative : forall G (A : nat -> R) (eps_low eps_high rho : R),
  0 <= eps_low /\
  0 <= eps_high /\
  1 + eps_high < rho /\
  (exists j, (j < G)%nat /\ A j < 0) ->
  Rsum G (fun i => R_clip_coef eps_low eps_high rho (A i)) < 0.
Proof.
  uncurried.
  intros G A el eh rho Hl Hh Hr [j [Hj Hn]].
  rewrite R_T4_above_event_coefficient by (repeat split; assumption).
  assert (0 < Rsum G (fun i => - R_neg_part (A i))).
  { refine (Rsum_pos G _ _ j Hj _).
    - intros i _. unfold R_neg_part. destruct Rlt_dec; lra.
    - unfold R_neg_part. destruct Rlt_dec; lra. }
  rewrite (Rsum_ext G _ (fun i => -1 * R_neg_part (A i))) in H by (intros; ring).
  rewrite Rsum_scale in H. nra.
Qed.

Theorem R_T4_below_event_coefficient : forall G (A : nat -> R) (eps_low eps_high rho : R),
  0 <= eps_low /\
  0 <= eps_high /\
  rho < 1 - eps_low ->
  Rsum G (fun i => R_clip_coef eps_low eps_high rho (A i)) = rho * Rsum G (fun i => R_pos_part (A i)).
Proof.
  uncurried.
  intros. rewrite <- Rsum_scale. apply Rsum_ext. intros i _.
  unfold R_clip_coef, R_pos_part.
  repeat destruct Rlt_dec; try lra; nra.
Qed.

Theorem R_T4_below_positive : forall G (A : nat -> R) (eps_low eps_high rho : R),
  0 <= eps_low /\
  0 <= eps_high /\
  0 < rho /\
  rho < 1 - eps_low /\
  (exists j, (j < G)%nat /\ 0 < A j) ->
  0 < Rsum G (fun i => R_clip_coef eps_low eps_high rho (A i)).
Proof.
  uncurried.
  intros G A el eh rho Hl Hh Hp Hr [j [Hj Hpos]].
  rewrite R_T4_below_event_coefficient by (repeat split; assumption).
  assert (0 < Rsum G (fun i => R_pos_part (A i))).
  { refine (Rsum_pos G _ _ j Hj _).
    - intros i _. unfold R_pos_part. destruct Rlt_dec; lra.
    - unfold R_pos_part. destruct Rlt_dec; lra. }
  nra.
Qed.

Theorem R_T4_inside_cancels : forall G (A : nat -> R) (eps_low eps_high rho : R),
  1 - eps_low <= rho /\
  rho <= 1 + eps_high /\
  Rsum G A = 0 ->
  Rsum G (fun i => R_clip_coef eps_low eps_high rho (A i)) = 0.
Proof.
  uncurried.
  intros G A el eh rho Hl Hh HZ.
  rewrite (Rsum_ext G _ (fun i => rho * A i)).
  - rewrite Rsum_scale, HZ. ring.
  - intros i _. unfold R_clip_coef. repeat destruct Rlt_dec; try lra; ring.
Qed.

(** ** M1 for any G: GSPO's sequence weight [s_i = exp(mean_t log rho_{i,t})].

    Response [i] has [L i > 0] tokens with log-ratios [logrho i t]; GSPO's per-token
    coefficient is [A_i * s_i / L_i], so a shared event occurring once per response gets
    [K = sum_i A_i (s_i / L_i)].  Cancellation for every one-hot reward vector (std
    normalisation) holds iff the [s_i / L_i] are all equal; with equal lengths, iff
    the sequence weights [s_i] are all equal.  Since [exp] is injective this is the
    set where the [mean_t log rho_{i,t}] are all equal, a proper subvariety
    (codimension [G - 1]) of ratio space; that last step is not formalised, because
    the standard library proves [exp]'s injectivity with the excluded middle, which is
    not on the allow-list. *)
Definition gspo_weight (L : nat) (logrho : nat -> R) : R := exp (Rsum L logrho / INR L).

Theorem R_M1_gspo : forall (G : nat) (L : nat -> nat) (logrho : nat -> nat -> R),
  (2 <= G)%nat ->
  ((forall j, (j < G)%nat ->
      RK G (Radv G (Rstd G (Rind j)) (Rind j))
           (fun i => gspo_weight (L i) (logrho i) / INR (L i)) = 0)
   <-> (forall i j, (i < G)%nat -> (j < G)%nat ->
          gspo_weight (L i) (logrho i) / INR (L i) = gspo_weight (L j) (logrho j) / INR (L j))).
Proof.
  intros G L logrho HG. split.
  - intros H. apply R_T2_necessity_std. split; [exact HG | exact H].
  - intros Heq j Hj. apply (R_T1_sufficiency G _ _ (gspo_weight (L O) (logrho O) / INR (L O))). split.
    + apply Radv_zero_sum.
    + intros i Hi. apply Heq; lia.
Qed.

Theorem R_M1_gspo_equal_lengths : forall (G : nat) (L : nat) (logrho : nat -> nat -> R),
  (2 <= G)%nat /\
  (0 < L)%nat ->
  ((forall j, (j < G)%nat ->
      RK G (Radv G (Rstd G (Rind j)) (Rind j)) (fun i => gspo_weight L (logrho i) / INR L) = 0)
   <-> (forall i j, (i < G)%nat -> (j < G)%nat -> gspo_weight L (logrho i) = gspo_weight L (logrho j))).
Proof.
  uncurried.
  intros G L logrho HG HL.
  rewrite (R_M1_gspo G (fun _ => L) logrho HG).
  assert (HLn : / INR L <> 0) by (apply Rinv_neq_0_compat, Rgt_not_eq, INR_pos; exact HL).
  split; intros H i j Hi Hj; specialize (H i j Hi Hj).
  - unfold Rdiv in H. apply (Rmult_eq_reg_r (/ INR L)); assumption.
  - rewrite H. reflexivity.
Qed.

(** ** Cor 3.3: for a fixed non-zero advantage vector the cancelling weights form a
    hyperplane.  [w -> K(A, w)] is linear and non-zero, so its kernel is closed under
    linear combinations, misses [A] itself, and every weight vector is a cancelling
    one plus a multiple of [A] (codimension 1). *)
Theorem R_Cor33_hyperplane : forall G (A : nat -> R),
  (exists j, (j < G)%nat /\ A j <> 0) ->
  (forall w1 w2 a b, RK G A w1 = 0 -> RK G A w2 = 0 ->
     RK G A (fun i => a * w1 i + b * w2 i) = 0) /\
  RK G A A <> 0 /\
  (forall w, exists t, RK G A (fun i => w i - t * A i) = 0).
Proof.
  intros G A [j [Hj Ha]].
  assert (HAA : 0 < RK G A A).
  { unfold RK. apply (Rsum_pos G _ (fun i _ => Rle_0_sqr (A i)) j Hj).
    apply Rsqr_pos_lt. exact Ha. }
  split; [|split; [lra|]].
  - intros w1 w2 a b H1 H2. unfold RK in *.
    rewrite (Rsum_ext G _ (fun i => a * (A i * w1 i) + b * (A i * w2 i))) by (intros; ring).
    rewrite Rsum_plus, Rsum_scale, Rsum_scale, H1, H2. ring.
  - intros w. exists (RK G A w / RK G A A). unfold RK in *.
    rewrite (Rsum_ext G _ (fun i => A i * w i - (Rsum G (fun i => A i * w i)
                                               / Rsum G (fun i => A i * A i)) * (A i * A i)))
      by (intros; ring).
    rewrite Rsum_minus, Rsum_scale. field. lra.
Qed.

(** ... and at [G = 3] that hyperplane holds weights that are not all equal
    (example [A = (1, 1, -2)], [w = (1, 3, 2)]): one reward vector's cancellation does
    not give (E). *)
